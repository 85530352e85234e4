"""Fault injection for the reliability tests: named pause points where a test can SIGKILL us.

``pause_point("packed_shards:staged")`` does nothing unless the environment variable
``CORPUS_PAUSE_AT`` names that point; then it creates the file named by ``CORPUS_PAUSE_FILE``
(so the test knows the process got there) and sleeps until it is killed. Production runs never
set the variable; the points mark the moments a crash is most harmful (files staged, pointer not
yet moved). The points:

    packed_shards:staged          every shard written, nothing renamed or published yet
    layer_store:sealed            a layer version uploaded and sealed, the remote pointer not moved
    release_manifest:staged       release artifacts staged, manifest and CURRENT not written
    release_mirror:uploaded       a build uploaded to the object store, not sealed
    release_manifest:published    CURRENT names the new build, the registry not written yet
                                  (``release/registry.reconcile`` repairs it)
"""

from __future__ import annotations

import os
import time
from pathlib import Path


def pause_point(name: str) -> None:
    if os.environ.get("CORPUS_PAUSE_AT") != name:
        return
    marker = os.environ.get("CORPUS_PAUSE_FILE")
    if marker:
        Path(marker).write_text(f"{name} {os.getpid()}\n")
    time.sleep(float(os.environ.get("CORPUS_PAUSE_SECONDS", "600")))
