"""What a launch tells afterwards: where it ran, what it counted, what it warned about."""
from __future__ import annotations

from dataclasses import dataclass, field

from course.cuda.status import Where


@dataclass(frozen=True)
class MemoryCounts:
    """Loads and stores the kernel made, per launch, summed over all threads.

    Global memory is the tensors passed to the launch; shared memory is the
    block's ``__shared__`` arrays.  Locals, registers and the builtins
    (threadIdx, ...) are not counted.  The numbers are those of the kernel as
    g++ compiled it for the CPU: an optimiser may keep a value in a register
    instead of loading it twice, as nvcc's would, but the two do not always
    make the same choices.  A float4 load, one 16-byte instruction on a GPU,
    usually counts here as four 4-byte loads: compare bytes, not loads, to
    see what vectorising saves.
    """

    global_loads: int = 0
    global_stores: int = 0
    global_load_bytes: int = 0
    global_store_bytes: int = 0
    shared_loads: int = 0
    shared_stores: int = 0
    shared_load_bytes: int = 0
    shared_store_bytes: int = 0
    global_atomics: int = 0
    shared_atomics: int = 0

    @classmethod
    def from_counters(cls, c) -> "MemoryCounts":
        """The counts from the emulator's ten counters, in field order."""
        return cls(*(int(x) for x in list(c)[:10]))

    @property
    def global_accesses(self) -> int:
        """Loads, stores and atomics on global memory together."""
        return self.global_loads + self.global_stores + self.global_atomics

    @property
    def shared_accesses(self) -> int:
        """Loads, stores and atomics on shared memory together."""
        return self.shared_loads + self.shared_stores + self.shared_atomics

    def __str__(self) -> str:
        return (f"global memory: {self.global_loads:,} loads ({self.global_load_bytes:,} B), "
                f"{self.global_stores:,} stores ({self.global_store_bytes:,} B), {self.global_atomics:,} atomics; "
                f"shared memory: {self.shared_loads:,} loads, {self.shared_stores:,} stores, "
                f"{self.shared_atomics:,} atomics")


def describe_element(name: str, offset: int, size: int, element_size: int, span: int, dense: bool) -> str:
    """Where an out-of-bounds access landed, counted from the tensor's first
    element: 'element 1000 of `out`, which has 1000 (valid: 0..999)'.

    span: how many elements the view reaches in memory (its numel when it is
    dense; more for a sliced view, whose valid offsets have gaps)."""
    if offset % element_size:
        return f"{size} bytes at byte offset {offset} of `{name}`, which spans {span * element_size} bytes"
    index = offset // element_size
    if dense:
        return f"element {index} of `{name}`, which has {span} (valid: 0..{span - 1})"
    return f"element {index} (counted in memory) of `{name}`, whose view spans {span} elements"


@dataclass(frozen=True)
class Finding:
    """One problem a diagnostic run found, in the student's terms."""

    kind: str                 # "out-of-bounds write", "data race", ...
    line: int | None          # the student's line
    code: str                 # that line's text
    message: str              # the whole explanation
    other_line: int | None = None   # for a race: the other access's line
    threads: tuple[str, ...] = ()

    def __str__(self) -> str:
        return self.message


@dataclass
class LaunchReport:
    """The result of one launch."""

    kernel: str
    where: Where
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int
    seconds: float
    counts: MemoryCounts | None = None          # emulator only
    static_shared_bytes: int | None = None      # emulator only: the __shared__ arrays it reached
    warnings: list[str] = field(default_factory=list)
    check: str | None = None                    # "bounds" or "races" for a diagnostic run
    findings: list[Finding] = field(default_factory=list)
    output: str = ""                            # what the kernel printed (emulator)

    def __repr__(self) -> str:
        g = "x".join(map(str, self.grid))
        b = "x".join(map(str, self.block))
        text = f"<{self.kernel} on the {self.where.value}: grid {g}, block {b}"
        if self.shared_mem:
            text += f", {self.shared_mem} B dynamic shared"
        text += f", {self.seconds * 1e3:.1f} ms"
        if self.counts is not None:
            text += f"; {self.counts}"
        if self.check:
            text += f"; check={self.check!r}: {len(self.findings)} finding(s)"
        if self.warnings:
            text += f"; {len(self.warnings)} warning(s)"
        return text + ">"
