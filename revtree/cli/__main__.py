from revtree.cli import main

main()
