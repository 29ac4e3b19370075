"""childguard.stdio_server: :func:`~childguard.spawn` set up for a stdio server (an MCP or LSP
server, behind any launcher) — the defaults of the Rust ``ChildHandle::stdio_server`` and the C
``cg_builder_new_stdio_server``."""

from __future__ import annotations

import inspect
import subprocess
from pathlib import Path
from typing import Any, Sequence, Union

from . import _native
from ._server import Server, StrPath, _pipe, _plan, spawn

#: The MCP close (the specification's stdio shutdown, the SDKs' timings): close the server's
#: stdin, 2 s for it to exit, SIGTERM, 2 s, SIGKILL, 5 s for the reap (``@mcp``).
MCP_LADDER = "EOF:2s,TERM:2s,KILL:5s"

_DEFAULTS = {
    "stdin": subprocess.PIPE,
    "stdout": subprocess.PIPE,
    "capture": "stderr",
    "ladder": MCP_LADDER,
    "contain": "best-effort",
    "process_group": True,
    "exit_with_parent": True,
}


def stdio_server(
    argv: Union[StrPath, Sequence[StrPath]], *, passthrough: bool = True, **options: Any
) -> Server:
    """Spawns a server that speaks over its stdin and stdout — an MCP server, a language server
    — started directly or through a launcher (``npx -y pkg``, ``uvx pkg``, ``sh -c "…"``), and
    returns its :class:`~childguard.Server`. Every :func:`~childguard.spawn` keyword works and
    overrides these defaults (the same in Rust, C and :mod:`childguard.mcp`):

    - ``stdin=PIPE, stdout=PIPE``: the channel, our ends :attr:`Server.stdin` /
      :attr:`Server.stdout`; the close closes stdin first (the EOF). (``socket="stdio"``: one
      socketpair on both instead.)
    - ``capture="stderr"`` with ``passthrough=True``: each line the server writes to its stderr
      is written to ours as it comes (fd 2, ``[program pid] line``, by the library's own thread,
      without the GIL) and kept in the bounded tail (:attr:`Server.output_tail`, the report,
      errors); ``passthrough=False``: the tail only.
    - ``ladder=MCP_LADDER`` (``EOF:2s,TERM:2s,KILL:5s``): the MCP close.
    - ``contain="best-effort"``, ``process_group=True``: the whole tree in a cgroup of its own
      when one can be made, else a process group of its own.
    - ``exit_with_parent=True``: if this process dies, even by ``SIGKILL``, the kernel kills the
      launcher and childguard's guardian the cgroup (Linux).
    """
    if options.get("socket") == "stdio":
        options.setdefault("stdin", None)
        options.setdefault("stdout", None)
    bound = inspect.signature(spawn).bind(argv, **{**_DEFAULTS, **options})
    bound.apply_defaults()
    p = dict(bound.arguments)
    p["passthrough"] = passthrough
    plan, args = _plan(p)
    native = _native.spawn(plan, stdin_pipe=_pipe(p["stdin"]), stdout_pipe=_pipe(p["stdout"]))
    cwd = p["cwd"]
    return Server(native, args, Path(cwd) if cwd is not None else None)
