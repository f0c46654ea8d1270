"""Where a class's submissions are: a folder or a zip, in either of two layouts.

    SUBMISSIONS/<student>/<chapter>.ipynb                 one folder per student
    SUBMISSIONS/[submitted/]<student>/<chapter>/<chapter>.ipynb   nbgrader's layout

A zip is unpacked first, member by member: absolute paths, `..`, links, devices
and oversized members are refused (and named), so an archive cannot write
outside its scratch folder or make the grader read a file it points to. A member
that cannot be unpacked (bad CRC, encrypted, a name no file system holds, a file
where the archive also has a folder, a duplicate) is skipped with a warning that
names it, and the rest is unpacked; a zip whose index is damaged or cut off is
read member by member from the start, as far as it goes.

A student folder without the notebook, or with a link in its place, is still a
submission: it is graded zero with a note saying what was found. Every entry of
the submissions folder is either a submission or named in a warning. A folder
name nbgrader cannot hold as a student id (a leading or trailing space, which it
strips; a leading `.`; glob characters; ...) is graded under an id derived from
it (`student_ids`); grades.csv and the report keep the folder's name beside it,
and the grading run says which names were changed and why (`renamed`). Names
that a reader cannot tell apart (`look_alike_groups`: the same once normalised,
zero-width characters dropped and confusable letters folded) are graded as the
students they are and named before grading and in the report.
"""
from __future__ import annotations

import hashlib
import os
import re
import stat
import struct
import tempfile
import unicodedata
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

MAX_MEMBER_BYTES = 64 * 1024 ** 2
MAX_ARCHIVE_BYTES = 4 * 1024 ** 3
MAX_NOTEBOOK_BYTES = MAX_MEMBER_BYTES
MAX_NAME_BYTES = 255  # one path component, on every file system the grader runs on
# Folders that tools leave next to students' folders: skipped, and named in a warning.
_TOOL_FOLDERS = {"__MACOSX": "macOS's archive metadata", ".ipynb_checkpoints": "Jupyter's checkpoints",
                 "__pycache__": "Python's bytecode cache", ".git": "a git repository", ".svn": "a Subversion copy",
                 ".hg": "a Mercurial repository", ".Trash": "a trash folder", ".DS_Store": "macOS's folder settings"}
_SKIP = set(_TOOL_FOLDERS)
# The gradebook's Student.id is a String(128); results/<id>.json and its temporary name must fit in 255 bytes.
MAX_ID_CHARS, MAX_ID_BYTES = 128, 200


class IntakeError(Exception):
    """The submissions cannot be read at all; the message says what to do."""


@dataclass
class Submission:
    student: str  # the id nbgrader, the gradebook, results/ and feedback/ use
    notebook: Path | None
    problem: str | None = None  # why there is no notebook to grade
    timestamp: str | None = None
    folder: str = ""  # the student's folder as handed in (printable), for grades.csv and messages
    renamed: str | None = None  # why the folder's name could not be the student id, when it could not
    notes: list[str] = field(default_factory=list)  # what intake noticed, for the student's results

    def __post_init__(self):
        self.folder = self.folder or printable(self.student)


def printable(name: str) -> str:
    """A file name as text that can be printed and written as UTF-8: bytes that were not
    UTF-8 (kept by Python as surrogates) appear as \\xNN."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


# ------------------------------------------------------------------ student ids

def id_problem(name: str) -> str | None:
    """Why nbgrader cannot hold `name` as a student id, or None if it can."""
    if not name:
        return "it is empty"
    if name != name.strip():
        return "it starts or ends with white space, which nbgrader strips from a student id"
    if name.startswith("."):
        return "it starts with '.', and nbgrader's file patterns do not see hidden folders"
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return "it is not valid UTF-8, which the gradebook cannot store"
    if any(unicodedata.category(c) in ("Cc", "Cs", "Zl", "Zp") for c in name):
        return "it holds control characters"
    if any(c in "*?[]" for c in name):
        return "it holds * ? [ or ], which nbgrader reads as a file pattern"
    if any(c in "+,\\" for c in name):
        return "it holds + , or \\, which nbgrader's exchange and student lists use as separators"
    if name.startswith(("=", "-", "@")):  # "+" and tab are refused above
        return "it starts with = - or @, which a spreadsheet opening a CSV reads as the start of a formula"
    if len(name) > MAX_ID_CHARS or len(name.encode("utf-8")) > MAX_ID_BYTES:
        return f"it is longer than the {MAX_ID_CHARS} characters the gradebook holds"
    return None


def _mapped(name: str, digits: int) -> str:
    digest = hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest()[:digits]
    base = re.sub(r"[^\w\-]+", "_", "".join(c for c in name if unicodedata.category(c) != "Cs"))
    base = base.strip("_.-")[:40] or "student"
    return f"{base}-{digest}"


def student_ids(names: list[str]) -> dict[str, str]:
    """{folder name: student id}: a name nbgrader can hold is its own id; any other gets
    `<the name's letters>-<8 hex digits of its SHA-256>`. Deterministic (the same folder
    name gets the same id in every run, so regrading replaces the right gradebook entry)
    and collision-free (longer digests, then a counter, where ids would meet)."""
    ids = {n: n for n in names if id_problem(n) is None}
    taken = set(ids.values())
    for name in sorted(n for n in names if n not in ids):
        candidate = _mapped(name, 8)
        if candidate in taken:
            candidate = _mapped(name, 16)
        count = 2
        while candidate in taken:
            candidate = f"{_mapped(name, 16)}-{count}"
            count += 1
        ids[name] = candidate
        taken.add(candidate)
    return ids


# ------------------------------------------------------------------ names that look alike

# Characters that show as nothing: two names that differ only by them look the same on every page.
_INVISIBLE = dict.fromkeys(map(ord, "\u00ad\u180e\u200b\u200c\u200d\u2060\ufeff"))
# Letters of other scripts that look like Latin ones, folded before comparing names. A small subset of
# Unicode's confusables.txt (https://www.unicode.org/Public/security/latest/confusables.txt): the Cyrillic
# and Greek letters that are drawn like a Latin letter in common fonts. Upper and lower case are folded
# separately because some differ by case (Greek Eta is drawn like H, its small eta like n).
_CONFUSABLE_PAIRS = {
    # Cyrillic
    "А": "A", "В": "B", "Е": "E", "К": "K", "М": "M", "Н": "H", "О": "O", "Р": "P", "С": "C", "Т": "T",
    "Х": "X", "У": "Y", "Ү": "Y", "Ѕ": "S", "І": "I", "Ј": "J", "Ԛ": "Q", "Ԝ": "W", "Ӏ": "l",
    "а": "a", "е": "e", "о": "o", "р": "p", "с": "c", "у": "y", "х": "x", "ѕ": "s", "і": "i", "ј": "j",
    "һ": "h", "ԁ": "d", "ԛ": "q", "ԝ": "w", "ӏ": "l", "ү": "y", "ѵ": "v",
    # Greek
    "Α": "A", "Β": "B", "Ε": "E", "Ζ": "Z", "Η": "H", "Ι": "I", "Κ": "K", "Μ": "M", "Ν": "N", "Ο": "O",
    "Ρ": "P", "Τ": "T", "Υ": "Y", "Χ": "X",
    "α": "a", "γ": "y", "ι": "i", "κ": "k", "ν": "v", "ο": "o", "ρ": "p", "υ": "u", "χ": "x", "ϲ": "c",
    "ϳ": "j",
    # Latin letters without their dot
    "ı": "i", "ȷ": "j",
}
_CONFUSABLES = str.maketrans(_CONFUSABLE_PAIRS)


def look_alike_key(name: str) -> str:
    """What `name` looks like: NFKC (full-width letters, ligatures, NFC against NFD), invisible
    characters dropped, confusable letters folded to Latin, case folded, white space collapsed.
    Two names with the same key are hard or impossible to tell apart on a page."""
    text = unicodedata.normalize("NFKC", name).translate(_INVISIBLE).translate(_CONFUSABLES)
    text = unicodedata.normalize("NFKC", text.casefold())
    return " ".join(text.split())


def look_alike_groups(names: list[str]) -> list[list[str]]:
    """The groups (two names or more, each sorted) of distinct `names` with the same look_alike_key."""
    groups: dict[str, set[str]] = {}
    for name in names:
        groups.setdefault(look_alike_key(name), set()).add(name)
    return sorted((sorted(g) for g in groups.values() if len(g) > 1), key=lambda g: g[0])


def code_points(name: str, limit: int = 64) -> str:
    """`name` as its exact code points, "U+006A U+006F ...": what tells look-alikes apart."""
    points = " ".join(f"U+{ord(c):04X}" for c in name[:limit])
    return points + (f" ... ({len(name)} in all)" if len(name) > limit else "")


# ------------------------------------------------------------------ zips

@dataclass
class _Member:
    name: str  # decoded, as the archive names it
    is_dir: bool
    size: int
    encrypted: bool = False
    special: bool = False  # a link, device or other non-file
    opener: object = None  # () -> iterator of byte chunks; raises when the data is damaged


def _decode_name(raw: bytes, utf8_flag: bool, archive: str, warnings: list[str]) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        name = raw.decode("cp437")
        why = "is marked UTF-8 but is not" if utf8_flag else "is not UTF-8"
        warnings.append(f"the name {raw!r} in {archive} {why}: read as cp437, the zip format's old "
                        f"encoding ({name!r})")
        return name


def _from_zipfile(zf: zipfile.ZipFile, archive: str, warnings: list[str]) -> list[_Member]:
    members = []
    for info in zf.infolist():
        if info.flag_bits & 0x800:
            name = info.filename
        else:  # zipfile read the name as cp437; most archivers that leave the flag off wrote UTF-8
            name = _decode_name(info.filename.encode("cp437"), False, archive, warnings)
        kind = stat.S_IFMT(info.external_attr >> 16)  # 0 when only permissions were recorded: a plain file

        def opener(info=info):
            with zf.open(info) as src:
                while chunk := src.read(1 << 20):
                    yield chunk
        members.append(_Member(name, info.is_dir(), info.file_size, bool(info.flag_bits & 0x1),
                               bool(kind) and kind not in (stat.S_IFREG, stat.S_IFDIR), opener))
    return members


_LOCAL = struct.Struct("<4sHHHHHIIIHH")
_LOCAL_SIGNATURE = b"PK\x03\x04"
_INDEX_SIGNATURES = (b"PK\x01\x02", b"PK\x05\x06", b"PK\x06\x06")


class _LocalMember:
    """One member found by its local header: reads (and checks) its data from the file."""

    def __init__(self, f, data_at: int, method: int, csize: int, usize: int, crc: int, described: bool):
        self.f, self.data_at, self.method, self.csize, self.usize, self.crc = f, data_at, method, csize, usize, crc
        self.described = described
        self.next_offset = None if described else data_at + csize  # known after reading when described

    def chunks(self):
        """The member's bytes; raises zipfile.BadZipFile when they are damaged or cut off."""
        f = self.f
        f.seek(self.data_at)
        inflater = zlib.decompressobj(-15) if self.method == 8 else None
        left = None if self.described else self.csize
        crc, total, consumed = 0, 0, 0
        while left is None or left > 0:
            chunk = f.read(1 << 20 if left is None else min(1 << 20, left))
            if not chunk:
                raise zipfile.BadZipFile("the archive ends inside this member (it was cut off)")
            consumed += len(chunk)
            if left is not None:
                left -= len(chunk)
            if inflater is not None:
                try:
                    out = inflater.decompress(chunk)
                except zlib.error as e:
                    raise zipfile.BadZipFile(f"its compressed data is damaged ({e})") from None
                if inflater.eof:
                    consumed -= len(inflater.unused_data)
                    left = 0
            else:
                out = chunk
            crc = zlib.crc32(out, crc)
            total += len(out)
            if out:
                yield out
        if inflater is not None and not inflater.eof:
            raise zipfile.BadZipFile("its compressed data ends early")
        expected_crc, expected_size = self.crc, self.usize
        if self.described:  # CRC and sizes follow the data, with or without a signature
            after = self.data_at + consumed
            f.seek(after)
            tail = f.read(24)
            skip = 4 if tail[:4] == b"PK\x07\x08" else 0
            if len(tail) < skip + 12:
                raise zipfile.BadZipFile("the archive ends inside this member (it was cut off)")
            expected_crc, expected_size = struct.unpack_from("<I", tail, skip)[0], total
            # 4-byte sizes, or 8-byte ones in a zip64 archive: the next header says which
            plain = after + skip + 12
            self.next_offset = plain if tail[skip + 12:skip + 16] in (_LOCAL_SIGNATURE, *_INDEX_SIGNATURES) \
                or len(tail) < skip + 20 else after + skip + 20
        if crc != expected_crc or total != expected_size:
            raise zipfile.BadZipFile("Bad CRC-32: its data does not match its checksum")


def _salvage(f, archive: str, warnings: list[str]) -> list[_Member]:
    """The members of a zip whose index (central directory) is missing or unreadable,
    found by reading its local headers from the start of the open file `f`. Stored and
    deflated members only; their CRC is checked. Links cannot be told apart here: every
    member is unpacked as a plain file (never as a link)."""
    end = os.fstat(f.fileno()).st_size
    members: list[_Member] = []

    def find_next(start: int) -> int:
        f.seek(start)
        window, base = b"", start
        while chunk := f.read(1 << 20):
            window += chunk
            at = window.find(_LOCAL_SIGNATURE)
            if at >= 0:
                return base + at
            base += len(window) - 3
            window = window[-3:]
        return -1

    offset = 0
    while 0 <= offset and offset + _LOCAL.size <= end:
        f.seek(offset)
        header = f.read(_LOCAL.size)
        if header[:4] != _LOCAL_SIGNATURE:
            if header[:4] in _INDEX_SIGNATURES:
                break  # the index begins: every member has been seen
            offset = find_next(offset + 1)
            continue
        _, _, flags, method, _, _, crc, csize, usize, name_len, extra_len = _LOCAL.unpack(header)
        raw_name, extra = f.read(name_len), f.read(extra_len)
        data_at = offset + _LOCAL.size + name_len + extra_len
        if len(raw_name) < name_len or data_at > end:
            warnings.append(f"{archive} ends inside the header of a member: what followed is lost")
            break
        name = _decode_name(raw_name, bool(flags & 0x800), archive, warnings)
        if 0xFFFFFFFF in (csize, usize):  # zip64: the sizes are in the extra field
            at = 0
            while at + 4 <= len(extra):
                tag, size = struct.unpack_from("<HH", extra, at)
                if tag == 0x0001 and size >= 16:
                    usize, csize = struct.unpack_from("<QQ", extra, at + 4)
                at += 4 + size
        described = bool(flags & 0x8)
        if method not in (0, 8) or (described and method == 0):
            why = (f"compression method {method}" if method not in (0, 8)
                   else "a stored member whose size only the index knew")
            warnings.append(f"skipped {name!r} in {archive}: {why} cannot be read without the archive's index")
            offset = find_next(data_at)
            continue
        member = _LocalMember(f, data_at, method, csize, usize, crc, described)
        if described:  # where the next header is, only reading this member tells
            try:
                for _ in member.chunks():
                    pass
            except zipfile.BadZipFile:
                member.next_offset = find_next(data_at)
        members.append(_Member(name, name.endswith("/"), usize, bool(flags & 0x1), False, member.chunks))
        offset = member.next_offset if member.next_offset is not None else -1
    return members


def _components_too_long(parts: tuple[str, ...]) -> str | None:
    for part in parts:
        if len(part.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
            return part
    return None


def unpack(archive: Path, into: Path, skipped: dict[Path, str] | None = None) -> list[str]:
    """Extract `archive` safely into `into`; returns warnings naming what was refused or skipped.
    `skipped`, when given, receives {path under `into`: why} for each member inside the
    archive that was not unpacked, so that its student's note can say why (see collect)."""
    skipped = {} if skipped is None else skipped
    warnings: list[str] = []
    label = archive.name
    try:
        f = open(archive, "rb")
    except OSError as e:
        raise IntakeError(f"{archive} cannot be read ({e}).") from None
    with f:
        zf = None
        try:
            zf = zipfile.ZipFile(f)
            members = _from_zipfile(zf, label, warnings)
        except (zipfile.BadZipFile, UnicodeDecodeError, ValueError, EOFError, struct.error,
                NotImplementedError) as e:  # no index, a damaged one, names it cannot decode, ...
            problem = e
        else:
            with zf:
                _extract(members, into, label, warnings, skipped)
            return warnings
        warnings = []
        members = _salvage(f, label, warnings)
        if not members:
            raise IntakeError(f"{archive} is not a readable zip file ({problem}). Re-create it, e.g. "
                              f"`cd SUBMISSIONS && zip -r ../class.zip .`.") from None
        warnings.insert(0, f"{label}'s index is damaged or missing ({problem}): its {len(members)} member(s) "
                           "were read one by one from the start, and links among them cannot be told from files. "
                           "Anything after a cut is lost: re-create the zip to be sure every student is in")
        _extract(members, into, label, warnings, skipped)
    return warnings


class _Unpacking:
    """One archive's unpacking into `into`: what is said about the members that are not unpacked (a warning
    each, in `warnings`; the paths of the files skipped, in `skipped`, so their students get a note)."""

    def __init__(self, into: Path, label: str, warnings: list[str], skipped: dict[Path, str]):
        self.into, self.label, self.warnings, self.skipped = into, label, warnings, skipped
        self.written = 0  # bytes that came out so far, whatever the headers announce

    def refuse(self, name: str, why: str, parts: tuple[str, ...] = ()) -> None:
        self.warnings.append(f"refused {name!r} in {self.label}: {why}")
        if parts:
            self.skipped[self.into.joinpath(*parts)] = why

    def skip(self, name: str, why: str, parts: tuple[str, ...] = ()) -> None:
        self.warnings.append(f"skipped {name!r} in {self.label}: {why}")
        if parts and _components_too_long(parts) is None:
            self.skipped[self.into.joinpath(*parts)] = why

    def keep_folder(self, parts: tuple[str, ...]) -> None:
        """The folder of a member that was not unpacked: its student still has a folder, graded
        0 with a note, rather than vanishing from the grades."""
        try:
            self.into.joinpath(*parts[:-1]).mkdir(parents=True, exist_ok=True)
        except OSError:
            pass

    def accepted(self, members: list[_Member]) -> list[tuple[_Member, tuple[str, ...]]]:
        """The members whose names can be unpacked here, with their path parts: none that points outside the
        archive, is a link or special file, names no file, or has a part longer than a file name may be."""
        accepted = []
        for m in members:
            parts = PurePosixPath(m.name.replace("\\", "/")).parts
            if m.name.startswith(("/", "\\")) or (parts and parts[0].endswith(":")) or ".." in parts:
                self.refuse(m.name, "it points outside the archive")
                continue
            if m.special:
                self.refuse(m.name, "a link or special file, not a plain file")
                if parts and _components_too_long(parts[:-1]) is None:
                    self.keep_folder(parts)
                continue
            if not parts:
                if not m.is_dir:
                    self.skip(m.name, "its name is empty or '.', which names no file")
                continue
            long = _components_too_long(parts)
            if long is not None:
                self.skip(m.name, f"its name has a part of {len(long.encode('utf-8', 'surrogateescape'))} bytes, "
                                  f"longer than the {MAX_NAME_BYTES} a file name may have")
                if _components_too_long(parts[:-1]) is None:
                    self.keep_folder(parts)
                continue
            accepted.append((m, parts))
        return accepted

    def write(self, m: _Member, parts: tuple[str, ...], target: Path) -> None:
        """The member's bytes at `target`, through a temporary file renamed into place; refused when more comes
        out than the grader accepts (a header's size can lie), skipped when it cannot be read."""
        partial = None
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, partial = tempfile.mkstemp(prefix=".unpacking-", dir=target.parent)
            left = min(MAX_MEMBER_BYTES, MAX_ARCHIVE_BYTES - self.written)
            with os.fdopen(fd, "wb") as dst:
                for chunk in m.opener():  # the header's size can lie; count what comes out
                    left -= len(chunk)
                    if left < 0:
                        break
                    dst.write(chunk)
                    self.written += len(chunk)
            if left < 0:
                self.refuse(m.name, "larger than the grader accepts", parts)
                return
            os.replace(partial, target)
            partial = None
        except (zipfile.BadZipFile, zlib.error, EOFError, RuntimeError, NotImplementedError, ValueError,
                OSError) as e:
            self.skip(m.name, f"it cannot be read ({type(e).__name__}: {e}); re-create the zip", parts)
        finally:
            if partial is not None and os.path.exists(partial):
                os.unlink(partial)


def _extract(members: list[_Member], into: Path, label: str, warnings: list[str],
             skipped: dict[Path, str]) -> None:
    """Unpack into `into` the members that are safe to unpack: a file whose name is also a folder, an earlier
    copy of a name, an encrypted or an oversized member is not (each with a warning), and no file lands outside
    `into`; the archive as a whole stops at MAX_ARCHIVE_BYTES."""
    unpack = _Unpacking(into, label, warnings, skipped)
    accepted = unpack.accepted(members)
    folders = {parts[:i] for m, parts in accepted for i in range(1, len(parts))}
    folders |= {parts for m, parts in accepted if m.is_dir}
    last = {parts: n for n, (m, parts) in enumerate(accepted) if not m.is_dir}
    total = 0  # bytes the headers announce
    for n, (m, parts) in enumerate(accepted):
        if m.is_dir:
            continue
        if parts in folders:
            unpack.skip(m.name, "the archive also has a folder of that name; the folder was kept", parts)
            continue
        if last[parts] != n:
            unpack.skip(m.name, "the archive holds this name more than once; the last copy was unpacked")
            continue
        if m.encrypted:
            unpack.skip(m.name, "it is encrypted; re-create the zip without a password", parts)
            unpack.keep_folder(parts)
            continue
        total += m.size
        if m.size > MAX_MEMBER_BYTES or total > MAX_ARCHIVE_BYTES:
            unpack.refuse(m.name, "larger than the grader accepts", parts)
            unpack.keep_folder(parts)
            continue
        target = into.joinpath(*parts)
        if not target.resolve().is_relative_to(into.resolve()):
            unpack.refuse(m.name, "it points outside the archive")
            continue
        unpack.write(m, parts, target)


# ------------------------------------------------------------------ student folders

def _layout_root(root: Path, chapter: str, notebook: str) -> Path:
    """Descend through wrapper folders (a zip of `class/`, nbgrader's `submitted/`)."""
    while True:
        if (root / "submitted").is_dir():
            return root / "submitted"
        entries = [p for p in root.iterdir() if p.name not in _SKIP and not p.name.startswith(".")]
        if len(entries) == 1 and entries[0].is_dir() and not entries[0].is_symlink() \
                and not (entries[0] / notebook).exists() and not (entries[0] / chapter).is_dir():
            root = entries[0]
            continue
        return root


def _timestamp(stamp: Path, notes: list[str]) -> str | None:
    """The submission time nbgrader's collect wrote, if nbgrader can read it (it fails the
    whole submission on one it cannot)."""
    if not stamp.is_file() or stamp.is_symlink():
        return None
    try:
        text = stamp.read_bytes()[:200].decode("utf-8").strip()
        if not text:
            return None
        from nbgrader.utils import parse_utc
        parse_utc(text)
        return text
    except Exception:
        notes.append(f"{stamp.parent.name}/timestamp.txt is not a time nbgrader can read: it was ignored, "
                     "and the submission was graded as not late")
        return None


def _has_notebook(folder: Path, chapter: str, notebook: str) -> bool:
    return any(c.exists() or c.is_symlink() for c in (folder / notebook, folder / chapter / notebook))


def _one(student_dir: Path, root: Path, chapter: str, notebook: str, skipped: dict[Path, str]) -> Submission:
    name = student_dir.name
    shown = printable(name)
    if student_dir.is_symlink():
        return Submission(name, None, f"{shown}/ is a link, not a folder: not graded")
    candidates = [student_dir / notebook, student_dir / chapter / notebook]
    path = next((c for c in candidates if c.exists() or c.is_symlink()), None)
    lost = next((c for c in candidates if c in skipped), None)
    if path is None and lost is not None:
        return Submission(name, None, f"{printable(lost.relative_to(root).as_posix())} could not be taken from the "
                                      f"zip it came in: {skipped[lost]}")
    if path is None:
        others = sorted(printable(p.relative_to(student_dir).as_posix()) for p in student_dir.rglob("*.ipynb")
                        if ".ipynb_checkpoints" not in p.parts)
        seen = f" (found {', '.join(others[:5])})" if others else ""
        return Submission(name, None, f"no {notebook} in the student's folder{seen}: "
                                      f"submit {notebook}, the notebook from release/{chapter}/")
    where = printable(path.relative_to(root).as_posix())
    if path.is_symlink() or not path.is_file():
        return Submission(name, None, f"{where} is a link or not a file: not graded")
    size = path.stat().st_size
    if size > MAX_NOTEBOOK_BYTES:
        return Submission(name, None, f"{where} is {size / 1024 ** 2:.0f} MiB, more than the grader reads "
                                      f"({MAX_NOTEBOOK_BYTES // 1024 ** 2} MiB): clear its outputs (Edit > "
                                      "Clear Outputs of All Cells), save, and submit it again")
    notes: list[str] = []
    timestamp = _timestamp(path.parent / "timestamp.txt", notes)
    return Submission(name, path, None, timestamp, notes=notes)


def collect(folder: Path, chapter: str, notebook: str, warnings: list[str] | None = None,
            skipped: dict[Path, str] | None = None) -> list[Submission]:
    """One Submission per student folder, sorted by folder name. What is not a student's
    folder is skipped and, when `warnings` is given, named there; a folder name that
    nbgrader cannot hold gets a student id of its own (see `student_ids`). `skipped` is
    what unpack() could not unpack: a student whose notebook is in it is told why."""
    warnings = [] if warnings is None else warnings
    skipped = skipped or {}
    try:
        root = _layout_root(folder, chapter, notebook)
        entries = sorted(root.iterdir())
    except OSError as e:
        raise IntakeError(f"{folder} cannot be read ({e}).") from None
    found = []
    for entry in entries:
        name, shown = entry.name, printable(entry.name)
        if name in _TOOL_FOLDERS:
            warnings.append(f"skipped {shown!r} in {printable(str(root))}: {_TOOL_FOLDERS[name]}, not a student's folder")
            continue
        try:
            is_dir = entry.is_dir()
            if not is_dir:
                warnings.append(f"skipped {shown!r} in {printable(str(root))}: a file, not a student's folder")
                continue
            if name.startswith(".") and not (not entry.is_symlink() and _has_notebook(entry, chapter, notebook)):
                warnings.append(f"skipped {shown!r} in {printable(str(root))}: a hidden folder without {notebook}")
                continue
            found.append(_one(entry, root, chapter, notebook, skipped))
        except OSError as e:
            found.append(Submission(name, None, f"{shown}/ could not be read ({e.strerror or e}): not graded"))
    ids = student_ids([s.student for s in found])
    for s in found:
        s.folder = printable(s.student)
        s.renamed = id_problem(s.student)
        if s.renamed:  # the run names these on its output (renamed()); the student is told in their results
            s.notes.insert(0, f"your folder {s.folder!r} was graded under the id {ids[s.student]!r} ({s.renamed})")
        s.student = ids[s.student]
    return found


def renamed(submissions: list[Submission]) -> list[str]:
    """One line per student folder graded under an id other than its name, saying why."""
    return [f"the student folder {s.folder!r} cannot be a student id ({s.renamed}): graded as {s.student!r}"
            for s in submissions if s.renamed]


def look_alikes(submissions: list[Submission]) -> list[str]:
    """Lines naming each group of student folders that look alike, with their code points and ids."""
    by_folder = {s.folder: s for s in submissions}
    lines = []
    for group in look_alike_groups(list(by_folder)):
        lines.append(f"names that look alike: {len(group)} student folders that differ only in invisible, "
                     "confusable or differently encoded characters (each is graded as its own student):")
        lines += [f"  {name!r} ({code_points(name)}): id {by_folder[name].student!r}" for name in group]
    return lines
