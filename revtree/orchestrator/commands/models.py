"""The model check: one call of one token to each model a run's roles call, no retry.

``check`` reports it with the rest of its preflight (``ping_models``); ``run`` and
``resume`` make it before they create or evaluate anything (``require_models``), and
import only this much to do so (the task's models, the clients, the model SDK: not the
store, the sandboxes or LangGraph), so the call goes out before those imports, and they
are made while it waits.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import FrameType

from revtree.agents.driver import driver
from revtree.agents.llm import LLMError, Prompt, make_llm, split_model
from revtree.orchestrator.llm_models import enabled_roles, model_name
from revtree.orchestrator.llm_models import role_models as clients
from revtree.tasks import TaskSpec

OK, FAIL, SKIP, WARN = "ok", "fail", "skip", "warn"
DEFAULT_URLS = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com"}
PING = Prompt(system="Answer with the one word: ok.", prefix="", user="ping")
CHECK_TIMEOUT = 30.0  # seconds, at most, for one model's check call
START_TIMEOUT = 15.0  # the same call before `run` / `resume` starts: kept short
Add = Callable[[str, str, str], object]  # an item: its name, status and message


@dataclass(frozen=True)
class Item:
    """One check: what (``task``, ``sandbox``, ``baseline``, ``model``, ``estimate``),
    its status (``ok``, ``fail``, ``skip``, ``warn``), a one-line message, and a detail
    (a stderr tail, a warning's whole text) for the reader who wants it."""

    name: str
    status: str
    message: str
    detail: str = ""


def role_models(spec: TaskSpec) -> dict[str, list[str]]:
    """The model names each role a run calls (``llm_models.enabled_roles``) calls, as
    ``llm_models.role_models`` resolves them (an empty list: no model for it)."""
    out = {}
    for name in enabled_roles(spec):
        role = getattr(spec.agents, name)
        model = model_name(spec, role)
        out[name] = [m.model for m in role.ensemble] if role.ensemble else [model] if model else []
    return out


def model_url(model: str, base_url: str | None) -> str:
    provider, _ = split_model(model)
    return (base_url or DEFAULT_URLS.get(provider, "(no base URL)")).rstrip("/")


def require_models(
    spec: TaskSpec, timeout: float = START_TIMEOUT, beside: Callable[[], object] | None = None
) -> None:
    """The model check of ``preflight`` (one call of one token to each model, no retry)
    for ``run`` and ``resume`` before they create or evaluate anything: raises
    ``LLMError`` naming each model and URL that did not answer. Nothing for an offline
    run.

    ``beside``: work for this thread while the calls wait on the network (where there
    are calls), done before the verdict is given (``run`` and ``resume`` import the
    orchestrator there: LangGraph and the pipeline take about 0.6 s of CPU, a hosted
    model's one-token answer 0.3-2 s, which the command otherwise waited out one after
    the other). The clients are built first, here, as the run builds them: the calls'
    thread imports only what the SDK loads on its first call. An exception of
    ``beside`` (a broken install) is raised as it is, before any verdict; the calls'
    thread, a daemon, is left to end on its own."""
    if not driver(spec).llm:
        return
    clients(spec)  # built as the run builds them: LLMError for one that cannot be
    failed: list[str] = []  # what each model that failed said
    raised: list[BaseException] = []

    def add(name: str, status: str, message: str) -> None:
        if status == FAIL:
            failed.append(message)

    def call() -> None:
        try:
            ping_models(spec, add, timeout)
        except BaseException as e:  # a bug, not a model's failure: raised below
            raised.append(e)

    calls = threading.Thread(target=call, name="revtree-model-check", daemon=True)
    with _ctrl_c() as pressed:
        calls.start()
        if beside is not None:
            beside()
        while calls.is_alive() and not pressed.is_set():  # (each call has ``timeout``)
            calls.join(0.1)
        if pressed.is_set():
            raise KeyboardInterrupt
    if raised:
        raise raised[0]
    if failed:
        raise LLMError("; ".join(f"model {message}" for message in failed))


@contextlib.contextmanager
def _ctrl_c() -> Iterator[threading.Event]:
    """An event set by a Ctrl-C while the block runs (in the main thread, where Python's
    own handler is in place), which still raises ``KeyboardInterrupt``. A Ctrl-C that
    lands inside an import's module-lock callback, as ``beside`` imports the
    orchestrator, is printed and ignored by Python, and the command would then wait out
    the model check: the event says it came."""
    pressed = threading.Event()
    main = threading.current_thread() is threading.main_thread()
    if not main or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield pressed
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        pressed.set()
        signal.default_int_handler(signum, frame)

    signal.signal(signal.SIGINT, handler)
    try:
        yield pressed
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def ping_models(spec: TaskSpec, add: Add, timeout: float = CHECK_TIMEOUT) -> None:
    """``check``'s call of one token to each model the run's roles call, each reported
    through ``add`` (ok, failed, or skipped and why)."""
    chosen = driver(spec)
    if not chosen.llm:
        mode = spec.agents.mode
        why = (
            f"agents.mode = {mode!r}"
            if mode != "auto"
            else chosen.offline_reason or "no model set, no OPENAI_API_KEY / ANTHROPIC_API_KEY"
        )
        add("model", SKIP, f"offline run ({why}): no model to call")
        return
    a, by_model = spec.agents, dict[str, list[str]]()
    for role, models in role_models(spec).items():
        if not models:
            add("model", FAIL, f"no model for the {role}: set agents.model or --model")
        for model in models:
            by_model.setdefault(model, []).append(role)
    for model, roles in by_model.items():
        url = model_url(model, a.base_url)
        who = f"{model} at {url} ({', '.join(roles)})"
        if model.startswith("scripted:"):
            add("model", SKIP, f"{who}: a scripted model, nothing to call")
            continue
        t0 = time.monotonic()
        try:
            llm = make_llm(
                model,
                base_url=a.base_url,
                api_key_env=a.api_key_env,
                timeout=min(a.timeout, timeout),
                max_retries=0,
                stream=False,
            )
            url = str(getattr(llm, "url", url))
            who = f"{model} at {url} ({', '.join(roles)})"
            llm.complete(PING, max_tokens=1, temperature=0.0)
        except Exception as e:  # a check reports what went wrong, whatever it was
            add("model", FAIL, f"{who}: {type(e).__name__}: {e}")
            continue
        add("model", OK, f"{who}: ok in {time.monotonic() - t0:.2f} s")
