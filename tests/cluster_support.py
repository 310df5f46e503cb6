"""A real Ray cluster on this machine for the cluster tests and the cluster benchmark: a head
node with no cores (so that no session lands on it) and worker nodes of one core each, small
object stores, no dashboard.

    with LocalCluster(workers=2) as cluster:       # about 5 s to start on two cores
        node = cluster.add_worker(resources={"doomed": 1})
        ...
        cluster.remove(node)                       # kills its processes (SIGKILL)
"""

from __future__ import annotations

import logging
from pathlib import Path
from types import TracebackType
from typing import Any

import ray
from ray.cluster_utils import Cluster

HERE = Path(__file__).resolve().parent
STORE_BYTES = 80 * 1024 * 1024  # the least Ray accepts comfortably; the calls are small


class LocalCluster:
    """A head without cores and ``workers`` worker nodes of ``cores`` each; this process is
    its driver while the cluster is open."""

    def __init__(self, workers: int = 2, *, cores: float = 1) -> None:
        self.cores = cores
        self.cluster = Cluster(
            initialize_head=True,
            head_node_args={
                "num_cpus": 0,
                "include_dashboard": False,
                "object_store_memory": STORE_BYTES,
            },
        )
        self.workers: list[Any] = []
        try:
            for _ in range(workers):
                self.add_worker()
            ray.init(
                address=self.cluster.address,
                logging_level=logging.WARNING,
                log_to_driver=False,
                # the tests' own tools (cluster_tools.py) import on the workers
                runtime_env={"env_vars": {"PYTHONPATH": str(HERE)}},
            )
        except BaseException:
            self.cluster.shutdown()
            raise

    def add_worker(self, *, resources: dict[str, float] | None = None) -> Any:
        """Start one more worker node (with ``resources`` as custom ones) and wait for it."""
        node = self.cluster.add_node(
            num_cpus=self.cores, object_store_memory=STORE_BYTES, resources=resources or {}
        )
        self.workers.append(node)
        self.cluster.wait_for_nodes()
        return node

    def remove(self, node: Any) -> None:
        """Kill a worker node's processes at once, as a machine that dies would."""
        self.workers.remove(node)
        self.cluster.remove_node(node, allow_graceful=False)

    def node_ids(self) -> list[str]:
        """The ids of the worker nodes alive."""
        return [n.node_id for n in self.workers]

    def shutdown(self) -> None:
        ray.shutdown()
        self.cluster.shutdown()

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.shutdown()
