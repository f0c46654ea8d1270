"""course.datasets: the shipped digits and its fixed split, and the IDX reader on small files written here."""
from __future__ import annotations

import gzip
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from course.datasets import (DIGITS_FILE, MNIST_FILES, Split, load_digits, load_mnist, read_idx, is_test_image,
                             write_idx)


@pytest.fixture(scope="module")
def digits():
    return load_digits()


def test_digits_shapes_dtypes_and_ranges(digits):
    assert isinstance(digits, Split)
    assert digits.train_images.shape == (1442, 64) and digits.test_images.shape == (355, 64)
    assert digits.train_labels.shape == (1442,) and digits.test_labels.shape == (355,)
    assert digits.train_images.dtype == np.float32 and digits.train_labels.dtype == np.int64
    for images in (digits.train_images, digits.test_images):
        assert images.min() == 0 and images.max() == 1
        assert images.flags.c_contiguous
    raw, labels = load_digits(scale=False, split=False)
    assert raw.shape == (1797, 64) and labels.shape == (1797,)
    assert np.array_equal(raw, np.round(raw)) and raw.min() == 0 and raw.max() == 16
    assert set(labels.tolist()) == set(range(10))


def test_the_split_is_every_fifth_image_of_each_class(digits):
    raw, labels = load_digits(scale=False, split=False)
    mask = is_test_image(labels)
    for c in range(10):
        where = np.flatnonzero(labels == c)
        assert np.array_equal(np.flatnonzero(mask[where]), np.arange(4, len(where), 5))
    counts = np.bincount(digits.test_labels, minlength=10)
    assert counts.min() >= 34 and counts.max() <= 36
    # the split partitions the images, in file order, and scaling is a division by 16
    assert np.array_equal(digits.test_images * 16, raw[mask]) and np.array_equal(digits.train_images * 16, raw[~mask])
    assert np.array_equal(digits.test_labels, labels[mask]) and np.array_equal(digits.train_labels, labels[~mask])
    again = load_digits()
    assert all(np.array_equal(a, b) for a, b in zip(digits, again))


def test_digits_file_is_what_the_readme_says():
    with gzip.open(DIGITS_FILE, "rt") as f:
        rows = f.read().splitlines()
    assert len(rows) == 1797 and all(len(r.split(",")) == 65 for r in rows)


def idx_bytes(array: np.ndarray, code: int) -> bytes:
    """The IDX layout written out by hand (struct, not numpy's byte order helpers)."""
    formats = {0x08: "B", 0x09: "b", 0x0B: "h", 0x0C: "i", 0x0D: "f", 0x0E: "d"}
    head = bytes([0, 0, code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    return head + struct.pack(f">{array.size}{formats[code]}", *array.reshape(-1).tolist())


CODES = {np.uint8: 0x08, np.int8: 0x09, np.int16: 0x0B, np.int32: 0x0C, np.float32: 0x0D, np.float64: 0x0E}


@pytest.mark.parametrize("dtype", list(CODES), ids=lambda d: d.__name__)
@pytest.mark.parametrize("gzipped", [False, True])
def test_read_idx_reads_hand_made_files(tmp_path, dtype, gzipped):
    rng = np.random.default_rng(0)
    array = (rng.standard_normal((3, 4, 5)) * 50).astype(dtype)
    raw = idx_bytes(array, CODES[dtype])
    path = tmp_path / ("x.idx.gz" if gzipped else "x.idx")
    path.write_bytes(gzip.compress(raw) if gzipped else raw)
    got = read_idx(path)
    assert got.dtype == np.dtype(dtype) and got.dtype.isnative and got.shape == (3, 4, 5)
    assert np.array_equal(got, array)
    assert write_idx(tmp_path / "y.idx", array).read_bytes() == raw


@settings(max_examples=60, deadline=None)
@given(hnp.arrays(st.sampled_from([np.uint8, np.int8, np.int16, np.int32, np.float32, np.float64]),
                  hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=4)),
       st.booleans())
def test_write_then_read_gives_the_array_back(tmp_path_factory, array, gzipped):
    path = tmp_path_factory.mktemp("idx") / ("a.idx.gz" if gzipped else "a.idx")
    got = read_idx(write_idx(path, array))
    assert got.shape == array.shape and got.dtype == array.dtype
    assert np.array_equal(got, array, equal_nan=True)


@pytest.mark.parametrize("raw, message", [
    (b"", "too short"),
    (b"\x00\x00", "too short"),
    (b"\x01\x00\x08\x01\x00\x00\x00\x01\x05", "two zero bytes"),
    (b"\x00\x00\x07\x01\x00\x00\x00\x01\x05", "unknown IDX type"),
    (b"\x00\x00\x08\x02\x00\x00\x00\x01", "header"),
    (b"\x00\x00\x08\x01\x00\x00\x00\x03\x05\x06", "truncated"),
    (b"\x00\x00\x08\x01\x00\x00\x00\x01\x05\x06", "longer than its header says"),
    (b"\x00\x00\x0d\x01\x00\x00\x00\x01\x05\x06", "truncated"),
])
def test_malformed_files_are_refused_with_a_reason(tmp_path, raw, message):
    path = tmp_path / "bad.idx"
    path.write_bytes(raw)
    with pytest.raises(ValueError, match=message):
        read_idx(path)


def test_a_broken_gzip_file_is_a_value_error(tmp_path):
    path = tmp_path / "bad.idx.gz"
    path.write_bytes(gzip.compress(idx_bytes(np.arange(10, dtype=np.uint8), 0x08))[:-12])
    with pytest.raises(ValueError, match="cannot read"):
        read_idx(path)


def test_write_idx_refuses_what_idx_cannot_hold(tmp_path):
    with pytest.raises(ValueError, match="IDX stores"):
        write_idx(tmp_path / "a.idx", np.zeros(3, np.int64))


def write_small_mnist(folder, n_train=7, n_test=3, gz=True):
    rng = np.random.default_rng(1)
    parts = {"train_images": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
             "train_labels": rng.integers(0, 10, n_train, dtype=np.uint8),
             "test_images": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
             "test_labels": rng.integers(0, 10, n_test, dtype=np.uint8)}
    for key, name in MNIST_FILES.items():
        write_idx(folder / (name + (".gz" if gz else "")), parts[key])
    return parts


@pytest.mark.parametrize("gz", [False, True])
def test_load_mnist_reads_the_four_files(tmp_path, gz):
    parts = write_small_mnist(tmp_path, gz=gz)
    split = load_mnist(tmp_path)
    assert split.train_images.shape == (7, 784) and split.test_images.shape == (3, 784)
    assert split.train_images.dtype == np.float32 and split.train_labels.dtype == np.int64
    assert np.allclose(split.train_images * 255, parts["train_images"].reshape(7, -1))
    assert np.array_equal(split.test_labels, parts["test_labels"])
    raw = load_mnist(tmp_path, scale=False)
    assert np.array_equal(raw.test_images, parts["test_images"].reshape(3, -1))


def test_load_mnist_says_what_is_missing_or_inconsistent(tmp_path):
    with pytest.raises(FileNotFoundError, match="train-images-idx3-ubyte"):
        load_mnist(tmp_path)
    write_small_mnist(tmp_path, gz=False)
    write_idx(tmp_path / MNIST_FILES["test_labels"], np.zeros(5, np.uint8))
    with pytest.raises(ValueError, match="do not make a data set"):
        load_mnist(tmp_path)
