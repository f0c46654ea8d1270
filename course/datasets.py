"""Real data for the training chapter, offline: the UCI 8×8 digits (shipped) and MNIST's IDX files.

    from course.datasets import load_digits, read_idx, load_mnist

    digits = load_digits()            # numpy arrays, float32 images in [0, 1] and int64 labels
    digits.train_images.shape         # (1442, 64)
    digits.test_images.shape          # (355, 64)

**The digits.** `course/data/digits.csv.gz` holds the 1 797 images of the UCI "Optical
Recognition of Handwritten Digits" test set, the copy scikit-learn ships as `load_digits()`
(see `course/data/README.md`): 64 pixel values from 0 to 16 and the label, one image a row.

**The split is fixed and needs no random numbers**, so it is the same on every machine and in
every NumPy version: within each class, taken in file order, every fifth image (the 5th, 10th,
15th, ... of that class) is a test image and the others are training images. That gives 355
test images (34–36 per class) and 1 442 training images. `load_digits()` divides the pixels
by 16, so images are in [0, 1]; `load_digits(scale=False)` gives the raw 0–16 values.

**MNIST.** `read_idx(path)` reads one IDX file (the format of MNIST's
`train-images-idx3-ubyte` and friends, optionally gzipped) into a NumPy array, and refuses a
malformed file with a `ValueError` that says what is wrong. `load_mnist(folder)` reads the
four standard files into the same kind of split as `load_digits()` (images flattened to 784
values in [0, 1]). The course does not ship MNIST: get the files yourself if you want them.
`write_idx(path, array)` writes an IDX file (the tests use it to make small ones).
"""
from __future__ import annotations

import gzip
from collections import namedtuple
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parent / "data"
DIGITS_FILE = DATA / "digits.csv.gz"
TEST_EVERY = 5  # within each class, every TEST_EVERY-th image is a test image

Split = namedtuple("Split", ["train_images", "train_labels", "test_images", "test_labels"])
Split.__doc__ = "A fixed train/test split: images (n, features) float32 and labels (n,) int64, as NumPy arrays."


def is_test_image(labels: np.ndarray, every: int = TEST_EVERY) -> np.ndarray:
    """True for the test images: within each class, in file order, the every-th, 2·every-th, ... image."""
    labels = np.asarray(labels)
    mask = np.zeros(len(labels), dtype=bool)
    for c in np.unique(labels):
        where = np.flatnonzero(labels == c)
        mask[where[every - 1::every]] = True
    return mask


def _split(images: np.ndarray, labels: np.ndarray) -> Split:
    test = is_test_image(labels)
    return Split(images[~test], labels[~test], images[test], labels[test])


def load_digits(scale: bool = True, split: bool = True):
    """The UCI 8×8 digits: a Split (see the module's doc) or, with split=False, (images, labels)
    for all 1 797. Images are float32 of shape (n, 64), divided by 16 unless scale=False; labels int64."""
    with gzip.open(DIGITS_FILE, "rt") as f:
        table = np.loadtxt(f, delimiter=",", dtype=np.float32, ndmin=2)
    if table.shape != (1797, 65):
        raise ValueError(f"{DIGITS_FILE} should hold 1797 rows of 65 values; it holds {table.shape}")
    images = np.ascontiguousarray(table[:, :64])
    labels = table[:, 64].astype(np.int64)
    if scale:
        images /= 16
    return _split(images, labels) if split else (images, labels)


# --- IDX: http://yann.lecun.com/exdb/mnist/ (the "FILE FORMATS" section) -----------------------
# magic number: two zero bytes, a type byte, the number of dimensions; then one big-endian int32 per
# dimension; then the values, big-endian, row-major.
IDX_TYPES = {0x08: np.dtype(np.uint8), 0x09: np.dtype(np.int8), 0x0B: np.dtype(">i2"), 0x0C: np.dtype(">i4"),
             0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}
_IDX_CODE = {(t.kind, t.itemsize): code for code, t in IDX_TYPES.items()}


def _open(path: Path):
    with open(path, "rb") as f:
        head = f.read(2)
    return gzip.open(path, "rb") if head == b"\x1f\x8b" else open(path, "rb")


def read_idx(path) -> np.ndarray:
    """The array stored in an IDX file (gzipped or not), in native byte order. ValueError if the
    file is not a well-formed IDX file: wrong magic number, unknown type, truncated, or too long."""
    path = Path(path)
    try:
        with _open(path) as f:
            data = f.read()
    except (OSError, EOFError) as e:
        raise ValueError(f"{path}: cannot read it as an IDX file ({e})") from None
    if len(data) < 4:
        raise ValueError(f"{path}: too short for an IDX file ({len(data)} bytes; the header alone is 4 bytes "
                         "and 4 more per dimension)")
    if data[0] != 0 or data[1] != 0:
        raise ValueError(f"{path}: not an IDX file: it must start with two zero bytes, not "
                         f"{data[0]:#04x} {data[1]:#04x}")
    code, ndim = data[2], data[3]
    if code not in IDX_TYPES:
        raise ValueError(f"{path}: unknown IDX type code {code:#04x}; known: "
                         + ", ".join(f"{c:#04x} ({t.name})" for c, t in IDX_TYPES.items()))
    header = 4 + 4 * ndim
    if len(data) < header:
        raise ValueError(f"{path}: the header says {ndim} dimensions, which need {header} header bytes, "
                         f"but the file has {len(data)} bytes")
    shape = tuple(int(n) for n in np.frombuffer(data, ">u4", count=ndim, offset=4))
    dtype = IDX_TYPES[code]
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    body = len(data) - header
    if body != expected:
        what = "truncated" if body < expected else "longer than its header says"
        raise ValueError(f"{path}: {what}: shape {shape} of {dtype.name} needs {expected} bytes of data after "
                         f"the header, the file has {body}")
    array = np.frombuffer(data, dtype, offset=header).reshape(shape)
    return array.astype(dtype.newbyteorder("="), copy=True)


def write_idx(path, array) -> Path:
    """Write `array` (uint8, int8, int16, int32, float32 or float64) as an IDX file; gzipped if the
    name ends in .gz."""
    path, array = Path(path), np.asarray(array)
    code = _IDX_CODE.get((array.dtype.kind, array.dtype.itemsize))
    if code is None:
        raise ValueError(f"IDX stores uint8, int8, int16, int32, float32 and float64; not {array.dtype}")
    if array.ndim > 255:
        raise ValueError("IDX stores at most 255 dimensions")
    header = bytes([0, 0, code, array.ndim]) + np.asarray(array.shape, ">u4").tobytes()
    body = np.ascontiguousarray(array, IDX_TYPES[code]).tobytes()
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wb") as f:
        f.write(header + body)
    return path


MNIST_FILES = {"train_images": "train-images-idx3-ubyte", "train_labels": "train-labels-idx1-ubyte",
               "test_images": "t10k-images-idx3-ubyte", "test_labels": "t10k-labels-idx1-ubyte"}


def _find(folder: Path, name: str) -> Path:
    for candidate in (name, name + ".gz", name.replace("-idx", ".idx"), name.replace("-idx", ".idx") + ".gz"):
        if (folder / candidate).exists():
            return folder / candidate
    raise FileNotFoundError(f"{folder}: no {name} (or {name}.gz): MNIST needs the four files "
                            + ", ".join(MNIST_FILES.values()))


def load_mnist(folder, scale: bool = True) -> Split:
    """MNIST from the four IDX files in `folder`: MNIST's own split (60 000 training and 10 000 test
    images), images flattened to (n, 784) float32 (divided by 255 unless scale=False), labels int64."""
    folder = Path(folder)
    parts = {key: read_idx(_find(folder, name)) for key, name in MNIST_FILES.items()}
    out = {}
    for side in ("train", "test"):
        images, labels = parts[f"{side}_images"], parts[f"{side}_labels"]
        if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
            raise ValueError(f"{folder}: {side} images of shape {images.shape} and labels of shape {labels.shape} "
                             "do not make a data set (expected (n, rows, cols) and (n,))")
        flat = images.reshape(len(images), -1).astype(np.float32)
        out[f"{side}_images"] = flat / 255 if scale else flat
        out[f"{side}_labels"] = labels.astype(np.int64)
    return Split(**out)
