"""
An nginx configuration for a child of the tests or the benchmarks: the frame, once.

Each caller runs nginx in the foreground, one process, everything (pid, logs, temporary
files) under a folder of its own, so no root and no packaged service are needed; it supplies
only what goes in the ``http`` block.  The binary comes from :mod:`.debian`.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["conf"]

_FRAME = """\
{modules}daemon off;
master_process off;
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log error;
worker_rlimit_nofile {files};
events {{ worker_connections {connections}; }}
http {{
    default_type text/plain;
    client_body_temp_path {tmp}/client_body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
{http}}}
"""


def conf(tmp: Path, http: str, *, modules: str = "", connections: int = 256) -> str:
    """
    The whole configuration: the ``http`` block's own lines (inserted as they are) in the frame.

    ``modules``: ``load_module`` lines, if any; ``connections``: each worker's at most.
    """
    return _FRAME.format(
        tmp=tmp, http=http, modules=modules, connections=connections, files=2 * connections
    )
