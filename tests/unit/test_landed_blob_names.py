"""Names of landed blobs are untrusted: only plain paths below the day's prefix are staged."""

from __future__ import annotations

import posixpath

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ml_platform.tasks import raw_drop_file_name

PREFIX = "raw/mnist/ds=2026-11-28/"
PARTITION = "/data/raw/mnist/ds=2026-11-28"


@pytest.mark.parametrize(
    "name",
    [
        "../x",
        "a/../../x",
        "a/..",
        "..",
        ".",
        "./x",
        "a/./b",
        "/etc/passwd",
        "//etc/passwd",
        "a//b",
        "",
        "a\\..\\..\\x",
        "x\x00.csv",
        "s3://bucket/x",
    ],
)
def test_names_that_could_leave_the_partition_are_refused_naming_the_blob(name):
    with pytest.raises(ValueError) as refused:
        raw_drop_file_name(PREFIX + name, PREFIX)
    assert repr(PREFIX + name) in str(refused.value)


@pytest.mark.parametrize("name", ["part-0.csv", "sub/part-1.parquet", "..hidden", "a..b/c.", "%2e%2e/x", "%2F..%2Fx"])
def test_plain_names_are_staged_as_they_are(name):
    # Names are never percent-decoded: "%2e%2e" is a file called "%2e%2e", not "..".
    assert raw_drop_file_name(PREFIX + name, PREFIX) == name


def test_a_blob_outside_the_prefix_is_refused():
    with pytest.raises(ValueError, match="ds=2026-11-27"):
        raw_drop_file_name("raw/mnist/ds=2026-11-27/part-0.csv", PREFIX)


SEGMENT = st.one_of(
    st.sampled_from(["", ".", "..", "...", "a", "part-0.csv", "%2e%2e", "a\\..", "\x00"]),
    st.text(min_size=0, max_size=8),
)


@given(st.lists(SEGMENT, min_size=1, max_size=6).map("/".join))
def test_an_accepted_name_always_lands_inside_the_partition(name):
    try:
        relative = raw_drop_file_name(PREFIX + name, PREFIX)
    except ValueError as refused:
        assert repr(PREFIX + name) in str(refused)
        return
    joined = posixpath.join(PARTITION, relative)
    # Inside the partition, and no normalisation needed: the file is where its name says.
    assert posixpath.normpath(joined) == joined
    assert joined.startswith(PARTITION + "/")
    assert "\\" not in relative and "\x00" not in relative
