"""The link between data-parallel ranks, alpha-beta: per preset, estimates until `planner
profile --all-reduce N` measures the process group (planner.costs.link).

A GPU preset's ranks sit 8 to a node (an NVIDIA DGX / HGX board): a ring of up to 8 ranks
stays on the node's NVLink; a larger one crosses nodes, and its slowest hop, the one every
ring step waits for, is the network between them. A ring over several nodes is priced on that
inter-node link alone (`ring_link`): NCCL runs one ring per NIC, so a node's rings together
move its NICs' aggregate bandwidth, which is the `bandwidth` here.

    ranks  1 .. 8        9 .. 256
    link   NVLink        InfiniBand (the node's NICs together)

Example:
    >>> interconnect_of = interconnect
    >>> from planner.target import preset
    >>> interconnect_of(preset("xeon-8180")).bandwidth
    12500000000.0
    >>> a100 = interconnect_of(preset("a100-80gb"))
    >>> ring_link(a100, 8).bandwidth / 1e9, ring_link(a100, 16).bandwidth / 1e9
    (240.0, 160.0)
"""

from __future__ import annotations

from pydantic import Field

from planner.ir.record import Record
from planner.target.backends import traits
from planner.target.records import Target


class Interconnect(Record):
    """The link between ranks, alpha-beta: `latency_seconds` per message, `bandwidth` in
    bytes/s, and where the numbers come from. With `node`, ranks come `ranks_per_node` to a
    node: a ring within one node runs on `node` (NVLink), a larger one on this link."""

    bandwidth: float = Field(gt=0)
    latency_seconds: float = Field(ge=0)
    source: str = ""
    node: Interconnect | None = None
    ranks_per_node: int = Field(default=1, ge=1)


def ring_link(link: Interconnect, ranks: int) -> Interconnect:
    """The one link a ring of `ranks` is priced on: the node's own when the ring fits in one
    node, else the link between nodes, the ring's bottleneck (module docstring)."""
    if link.node is not None and ranks <= link.ranks_per_node:
        return link.node
    return link


# Per preset. Estimates until `planner profile` measures the process group: gloo over
# loopback TCP between processes of one host (the "host" target and any unknown CPU target),
# 100 Gb/s InfiniBand-class links between the CPU presets' cluster nodes.
_LOOPBACK = Interconnect(bandwidth=2e9, latency_seconds=50e-6,
                         source="estimate: gloo over loopback TCP on one host")
_CLUSTER = Interconnect(bandwidth=12.5e9, latency_seconds=5e-6,
                        source="estimate: 100 Gb/s InfiniBand between nodes")

# GPU presets (NCCL): bandwidths are 80% of the datasheets' raw rates per direction (as the
# presets' PCIe host links, planner.target.presets); latencies are per ring step, estimates:
# about 1 us over NVLink, 5 us over InfiniBand with GPUDirect RDMA. Nodes as NVIDIA builds
# them (the DGX datasheets): DGX-1 (V100): NVLink 2, 6 links x 25 GB/s per direction per GPU,
# 4 x 100 Gb/s EDR InfiniBand per node; DGX A100: NVLink 3, 300 GB/s per direction per GPU,
# 8 x 200 Gb/s HDR; DGX H100 / H200: NVLink 4, 450 GB/s per direction, 8 x 400 Gb/s NDR.
_EFFICIENCY = 0.8


def _dgx(nvlink: float, nics: int, nic_gbit: float, name: str) -> Interconnect:
    node = Interconnect(bandwidth=_EFFICIENCY * nvlink, latency_seconds=1e-6,
                        source=f"estimate: {name} NVLink, 80% of {nvlink / 1e9:g} GB/s per "
                               f"direction per GPU")
    return Interconnect(bandwidth=_EFFICIENCY * nics * nic_gbit / 8, latency_seconds=5e-6,
                        source=f"estimate: {name} nodes of 8 GPUs, {nics} x {nic_gbit / 1e9:g} "
                               f"Gb/s InfiniBand per node at 80%; NVLink within a node",
                        node=node, ranks_per_node=8)


INTERCONNECTS: dict[str, Interconnect] = {
    "knl-7250": _CLUSTER, "xeon-8180": _CLUSTER,
    "v100-16gb": _dgx(150e9, 4, 100e9, "DGX-1 (V100)"),
    "a100-80gb": _dgx(300e9, 8, 200e9, "DGX A100"),
    "h100-80gb": _dgx(450e9, 8, 400e9, "DGX H100"),
    "h200-141gb": _dgx(450e9, 8, 400e9, "DGX H200"),
}


def interconnect(target: Target) -> Interconnect:
    """The target's link between ranks: its preset's; for another GPU target (a detected
    one, a PCIe board), NCCL between the GPUs of one host over their PCIe links; else gloo
    over loopback on one host.

    >>> from planner.target import preset
    >>> interconnect(preset("l4-24gb")).source
    'estimate: NCCL over PCIe between the GPUs of one host (the host link, 5 us a step)'
    """
    if target.name in INTERCONNECTS:
        return INTERCONNECTS[target.name]
    if traits(target).gpu_links and target.gpus:
        return Interconnect(bandwidth=target.gpus[0].host_link_bandwidth, latency_seconds=5e-6,
                            source="estimate: NCCL over PCIe between the GPUs of one host "
                                   "(the host link, 5 us a step)")
    return _LOOPBACK
