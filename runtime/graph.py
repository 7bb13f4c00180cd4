"""The job graph and the physical plan of one run.

A job (``runtime.job.Job``) is a directed acyclic graph of operators (``Node``) from sources to sinks; each
operator has one input, or several (``union``, ``connect``, joins: its *inputs*, numbered 0, 1, … in the order
the API names them), and its own parallelism; fan-out is allowed (a stream may feed several operators), but an
operator reads a given upstream operator through one input only. Between two operators records move
*forward* (instance ``i`` to instance ``i``: equal parallelisms, no key), by *rebalance* (round-robin batches
to every downstream instance) or by *key* (after ``key_by``: each row to the instance owning its key group;
the key belongs to the input, so the two inputs of a join may key by differently named columns). The plan of
a run (``Plan``) makes that graph tasks and channels: every instance of the upstream operator has one channel
to every downstream instance it can send to, and each channel knows which input of its downstream operator it
feeds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from replay.keyhash import Key

from .errors import JobGraphError

SOURCE, OPERATOR, SINK = "source", "operator", "sink"


@dataclass
class Node:
    """One operator of the graph (internal representation; built by the Stream API)."""

    name: str
    kind: str
    parallelism: int
    make: Callable[[], Any] = field(repr=False)
    inputs: list[str] = field(default_factory=list)
    """The upstream operators, by input number (none for a source)."""
    keys: list[Key | None] = field(default_factory=list)
    """The key of each input (None: not keyed), in the order of ``inputs``."""
    location: str | None = None
    """The log URI a ``from_log`` source reads or a ``to_log`` sink writes (checked before a run)."""

    @property
    def input(self) -> str | None:
        """The first (for most operators the only) upstream operator; None for a source."""
        return self.inputs[0] if self.inputs else None

    @property
    def key(self) -> Key | None:
        """The key of the first input (None: not keyed)."""
        return self.keys[0] if self.keys else None

    @property
    def keyed(self) -> bool:
        """True when some input is keyed (the operator's instances own key groups)."""
        return any(k is not None for k in self.keys)

    def key_of(self, upstream: str) -> Key | None:
        """The key of the input that reads ``upstream``."""
        return self.keys[self.inputs.index(upstream)]


# -- the physical plan -----------------------------------------------------------------------------------


@dataclass
class ChannelSpec:
    """One channel of a run: ``name`` = ``<from>.<i>-<to>.<j>``, ``position`` = its index in the plan."""

    position: int
    name: str
    src: str
    src_index: int
    dst: str
    dst_index: int
    input: int = 0
    """Which input of the downstream operator the channel feeds."""


@dataclass
class TaskSpec:
    """One task of a run: an instance of an operator, or of a chain of operators (``chaining=True``)."""

    node: str
    """The (first) operator's name."""
    index: int
    parallelism: int
    kind: str
    """The first operator's kind (``source`` tasks poll their source; the others read channels)."""
    inputs: list[ChannelSpec]
    outputs: dict[str, list[ChannelSpec]]
    """Per downstream operator, its channels by downstream instance (one for forward)."""
    routing: dict[str, str]
    """Per downstream operator: ``forward``, ``rebalance`` or ``key``."""
    chain: list[str] = field(default_factory=list)
    """The operators the task runs, in order (one unless chained)."""
    has_sink: bool = False
    """True when the task's last operator is a sink (the job master waits for its commits)."""

    @property
    def key(self) -> str:
        """``node.index``."""
        return f"{self.node}.{self.index}"


class Plan:
    """Tasks and channels of a run of job ``name`` (its ``nodes``, by name) with their current parallelisms.

    With ``chaining=True`` an operator whose only input is forwarded from an operator it is the only
    consumer of (same parallelism, no key) runs in the same task as that operator, as Flink chains
    operators: records pass between them as calls, not through a channel."""

    def __init__(self, name: str, key_groups: int, nodes: dict[str, Node], chaining: bool = False) -> None:
        self.name = name
        self.key_groups = key_groups
        self.nodes = dict(nodes)
        self.parallelism = {n: node.parallelism for n, node in self.nodes.items()}
        self.order = self._topological()
        downstream: dict[str, list[Node]] = {n: [] for n in self.nodes}
        for node in self.nodes.values():
            for upstream in node.inputs:
                downstream[upstream].append(node)
        # chains: head -> operators; tail of a chain -> its head
        self.chains: dict[str, list[str]] = {}
        head_of: dict[str, str] = {}
        for name in self.order:
            node = self.nodes[name]
            up = self.nodes[node.inputs[0]] if len(node.inputs) == 1 else None
            if (chaining and up is not None and node.key is None and node.kind != SOURCE
                    and up.kind != SINK and up.parallelism == node.parallelism and len(downstream[up.name]) == 1):
                head = head_of[up.name]
                self.chains[head].append(name)
            else:
                head = name
                self.chains[head] = [name]
            head_of[name] = head
        self.head_of = head_of
        self.channels: list[ChannelSpec] = []
        self.tasks: list[TaskSpec] = []
        inputs: dict[tuple[str, int], list[ChannelSpec]] = {}
        outputs: dict[tuple[str, int], dict[str, list[ChannelSpec]]] = {}
        routing: dict[str, dict[str, str]] = {n: {} for n in self.nodes}
        for name in self.order:
            src = self.nodes[name]
            for dst in downstream[name]:
                if head_of[dst.name] != dst.name:
                    continue                      # chained: no channel
                mode = "key" if dst.key_of(name) is not None else ("forward" if dst.parallelism == src.parallelism
                                                                   else "rebalance")
                routing[name][dst.name] = mode
                port = dst.inputs.index(name)
                for i in range(src.parallelism):
                    targets = [i] if mode == "forward" else list(range(dst.parallelism))
                    outs = outputs.setdefault((name, i), {}).setdefault(dst.name, [])
                    for j in targets:
                        ch = ChannelSpec(len(self.channels), f"{name}.{i}-{dst.name}.{j}", name, i, dst.name, j,
                                         port)
                        self.channels.append(ch)
                        outs.append(ch)
                        inputs.setdefault((dst.name, j), []).append(ch)
        for head, chain in self.chains.items():
            node = self.nodes[head]
            tail = chain[-1]
            for i in range(node.parallelism):
                self.tasks.append(TaskSpec(head, i, node.parallelism, node.kind, inputs.get((head, i), []),
                                           outputs.get((tail, i), {}), routing[tail], list(chain),
                                           self.nodes[tail].kind == SINK))

    def _topological(self) -> list[str]:
        order: list[str] = []
        seen: set[str] = set()

        def visit(name: str, path: tuple[str, ...]) -> None:
            if name in path:
                raise JobGraphError(f"the job graph has a cycle through {name!r}")
            if name in seen:
                return
            node = self.nodes[name]
            twice = sorted({up for up in node.inputs if node.inputs.count(up) > 1})
            if twice:
                raise JobGraphError(f"operator {name!r} reads operator {twice[0]!r} through two inputs (give one "
                                    f"of them an operator of its own first, e.g. a map)")
            for up in node.inputs:
                if up not in self.nodes:
                    raise JobGraphError(f"operator {name!r} reads unknown operator {up!r}")
                visit(up, path + (name,))
            seen.add(name)
            order.append(name)

        for name in self.nodes:
            visit(name, ())
        return order

    @property
    def total_slots(self) -> int:
        """Operator instances in the run (Spark barrier mode needs this many task slots)."""
        return len(self.tasks)

    def node_kind(self, node: str) -> str:
        """``source``, ``operator`` or ``sink``."""
        return self.nodes[node].kind

    def __repr__(self) -> str:
        return f"Plan({self.name!r}, tasks={len(self.tasks)}, channels={len(self.channels)})"
