"""Files that revtree copies into evaluation workspaces for OpenEvolve and ShinkaEvolve tasks.

Everything here runs inside the sandbox, under whatever Python the sandbox has (the host's
with the local backend, the image's with docker, where revtree is not installed). So each
file imports only the standard library and never ``revtree``. The loaders read these files
as text and put them into ``TaskSpec.support_files``; they are not imported by revtree.
"""
