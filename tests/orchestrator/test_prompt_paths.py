"""Prompt templates come only from inside the task folder (issue 23, item 9): an
``[agents.proposer] prompt = "/abs/path"`` outside the task was read and sent to the
model. Now the task does not load (one line naming the setting), and a template inside
the folder that is a link out of it is refused when it would be read."""

from __future__ import annotations

from pathlib import Path

import pytest

from revtree.agents.llm.base import LLMError
from revtree.agents.roles import load_template
from tests.orchestrator.conftest import make_task, revtree


@pytest.mark.parametrize("where", ["/etc/passwd", "../outside.md", "prompts/../../x.md", "~/p.md"])
@pytest.mark.slow  # 11 s of --quick under -n 2 (issue 24)
def test_a_prompt_outside_the_task_folder_is_a_task_error(
    tmp_path: Path, home: Path, where: str
) -> None:
    task = make_task(tmp_path / "t")
    with task.joinpath("task.toml").open("a") as f:
        f.write(f'\n[agents.proposer]\nprompt = "{where}"\n')
    out = revtree(home, "check", str(task), check=False, REVTREE_SANDBOX="local")
    assert out.returncode != 0
    text = out.stdout + out.stderr
    assert "prompt template must be a file inside the task folder" in text, text
    assert "Traceback" not in text


def test_a_prompt_inside_the_folder_loads_and_a_link_out_is_refused(tmp_path: Path) -> None:
    task = make_task(tmp_path / "t")
    (task / "prompts").mkdir()
    (task / "prompts" / "coder.md").write_text("system {x}\n=== USER ===\nuser\n")
    system, _ = load_template("coder", "prompts/coder.md", str(task))
    assert "system" in system.template
    secret = tmp_path / "secret.md"
    secret.write_text("a secret\n=== USER ===\nuser\n")
    (task / "prompts" / "link.md").symlink_to(secret)
    with pytest.raises(LLMError, match="leads out of the task folder"):
        load_template("coder", "prompts/link.md", str(task))
