"""The nodes of a run: which node each rank is on, whether the nodes share ``trainer.run_dir``, and, when each
node has a directory of its own, which checkpoint every node can resume from.

Rank roles (``launch/README.md#several-nodes``):

- **global rank 0** (on node 0) writes the run's records: ``config.yaml``, ``meta.json``, ``metrics.jsonl``,
  ``data_hashes.json``, evaluation outputs, ``final/`` and ``run_complete.json``;
- **shared run dir** (every node sees the same directory, a cluster file system): global rank 0 also takes the
  lock and writes each checkpoint's weights, optimizer, scheduler and trainer state; every rank writes its own
  ``rng_rank<r>`` files into the same checkpoint; a checkpoint is complete for the whole run at once;
- **node-local run dirs** (each node its own disk): each node's local rank 0 takes that node's lock and writes a
  full checkpoint there (weights, optimizer, scheduler, trainer state, every rank's RNG files: any node's copy is
  the whole run's checkpoint), renamed and marked complete on that node; on resume every node lists its complete
  checkpoints and the run continues from the newest step complete (and verified) on *every* node, or refuses in
  one line when there is none.

Which of the two applies is found at start (:func:`detect`): each node's local rank 0 writes a probe file named
with a token from rank 0 into its ``trainer.run_dir``, and every node reports which nodes' probes it sees.
``trainer.run_dir_layout`` (``auto | shared | node_local``) accepts what is found or states what must be found;
a mismatch, a mixture, or DeepSpeed with node-local directories is refused at start in one line naming the
setting. On one node nothing is probed.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from selectrust.core.errors import ConfigError
from trainer.runtime.distributed import all_gather_object, uses_deepspeed

LAYOUT_KEY = "trainer.run_dir_layout"
PROBE = ".node-probe"


@dataclass(frozen=True)
class Nodes:
    node: int = 0             # this rank's node (torchrun's GROUP_RANK)
    count: int = 1            # nodes in the run
    node_local: bool = False  # each node has its own trainer.run_dir

    def owner(self, acc) -> bool:
        """Whether this rank writes the checkpoints and holds the lock of its run directory: global rank 0 of a
        shared directory, each node's local rank 0 of node-local ones."""
        return bool(acc.is_local_main_process if self.node_local else acc.is_main_process)


def node_index() -> int:
    """This process's node: ``GROUP_RANK``, set by torchrun (and ``accelerate launch``) on every rank; 0 without."""
    return int(os.environ.get("GROUP_RANK", "0") or 0)


def layout_of(views: dict[int, list[int]], nodes: list[int]) -> str:
    """``shared`` when every node saw every node's probe, ``node_local`` when each saw only its own, else ``mixed``.
    ``views``: node -> the nodes whose probes it saw."""
    if all(sorted(v) == sorted(nodes) for v in views.values()):
        return "shared"
    if all(list(v) == [n] for n, v in views.items()):
        return "node_local"
    return "mixed"


def layout_refusal(setting: str, layout: str, *, run_dir: Path, views: dict[int, list[int]],
                   deepspeed: bool) -> str | None:
    """The one-line refusal for what :func:`detect` found, or None when the run may start."""
    setting = str(setting)
    where = f"trainer.run_dir={run_dir}"
    if layout == "mixed":
        seen = "; ".join(f"node {n} sees the probes of nodes {v}" for n, v in sorted(views.items()))
        return (f"{where}: some nodes share it and some do not ({seen}): give every node the same shared directory, "
                f"or each node one of its own ({LAYOUT_KEY})")
    if setting == "shared" and layout == "node_local":
        return (f"{LAYOUT_KEY}=shared but the nodes do not share {where} (no node sees the files another writes "
                f"there): put it on a file system every node mounts, or set {LAYOUT_KEY}=node_local to keep a full "
                f"checkpoint on every node")
    if setting == "node_local" and layout == "shared":
        return (f"{LAYOUT_KEY}=node_local but every node sees the same {where} (a shared file system): their "
                f"checkpoints would overwrite each other; give each node a directory of its own, or set "
                f"{LAYOUT_KEY}=shared")
    if layout == "node_local" and deepspeed:
        return (f"DeepSpeed with node-local run dirs is not supported (its sharded checkpoint is written by every "
                f"rank into one directory; untested here): put {where} on a file system every node mounts "
                f"({LAYOUT_KEY}=shared)")
    return None


def detect(acc, run_dir: Path, setting: str = "auto") -> Nodes:
    """Find the run's nodes and whether they share ``run_dir`` (a collective: every rank calls it); raise a
    ``ConfigError`` on every rank with :func:`layout_refusal`'s line. One process or one node: no probe."""
    if acc.num_processes == 1:
        return Nodes()
    node = node_index()
    token = secrets.token_hex(8) if acc.is_main_process else None
    gathered = all_gather_object(acc, (node, token))
    token = gathered[0][1]
    nodes = sorted({n for n, _ in gathered})
    if len(nodes) == 1:
        return Nodes(node=node, count=1)
    probe = run_dir / f"{PROBE}-{token}-node{node}"
    if acc.is_local_main_process:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe.touch()
    acc.wait_for_everyone()
    # a name never looked up before: even an NFS client asks the server (no cached negative entry)
    seen = [n for n in nodes if (run_dir / f"{PROBE}-{token}-node{n}").exists()] if acc.is_local_main_process else None
    views = {n: v for n, v in all_gather_object(acc, (node, seen)) if v is not None}
    if acc.is_local_main_process:
        probe.unlink(missing_ok=True)
    layout = layout_of(views, nodes)
    problem = layout_refusal(setting, layout, run_dir=run_dir, views=views, deepspeed=uses_deepspeed(acc))
    if problem is not None:
        raise ConfigError(problem)
    return Nodes(node=node, count=len(nodes), node_local=layout == "node_local")


# -- node-local resume: the newest step complete on every node ------------------------------------------------
def common_steps(steps_by_node: dict[int, list[int]]) -> list[int]:
    """The checkpoint steps every node holds complete, newest first."""
    sets = [set(s) for s in steps_by_node.values()]
    return sorted(set.intersection(*sets), reverse=True) if sets else []


def no_common_checkpoint(steps_by_node: dict[int, list[int]], run_dir: Path) -> str:
    """The one-line refusal when node-local directories hold checkpoints but none complete on every node."""
    held = "; ".join(f"node {n}: {', '.join(f'step_{s}' for s in sorted(v)) or 'none'}"
                     for n, v in sorted(steps_by_node.items()))
    return (f"the node-local run dirs (trainer.run_dir={run_dir}, {LAYOUT_KEY}) hold no checkpoint that is complete "
            f"on every node ({held}), so the run cannot resume exactly: copy one node's checkpoint directory (each "
            f"holds the whole run's state) into every node's trainer.run_dir/checkpoints/, or start over with "
            f"trainer.overwrite=true")


def local_checkpoint(run_dir: Path, resume: str, step: int) -> Path:
    """This node's copy of checkpoint ``step``: in its own ``run_dir`` (``trainer.resume=auto``), or where the
    given path points on this node."""
    from trainer.runtime.checkpoint import CHECKPOINTS, checkpoints_dir  # deferred: imports numpy

    if resume == "auto":
        return checkpoints_dir(run_dir) / f"step_{step}"
    path = Path(resume).expanduser()
    return path / f"step_{step}" if path.name == CHECKPOINTS else path
