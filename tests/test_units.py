import pytest

from xmemplan.errors import UsageError
from xmemplan.units import (
    format_bytes,
    format_count,
    is_byte_quantity,
    parse_bandwidth,
    parse_bytes,
    parse_count,
    parse_duration,
)


@pytest.mark.parametrize(
    "text,value",
    [("64k", 64_000), ("64Ki", 65_536), ("3M", 3_000_000), ("1.5k", 1500), ("12", 12), (7, 7)],
)
def test_parse_count(text, value):
    assert parse_count(text) == value


@pytest.mark.parametrize("text", ["abc", "1.5", "-3", "5X", "1e400"])
def test_parse_count_rejects(text):
    with pytest.raises(UsageError):
        parse_count(text)


def test_bytes_si_and_iec():
    assert parse_bytes("24TB") == 24e12
    assert parse_bytes("80GiB") == 80 * 2**30
    assert parse_bytes("512 B") == 512
    with pytest.raises(UsageError, match="no byte unit"):
        parse_bytes("80")
    with pytest.raises(UsageError):
        parse_bytes("80Gb/s")


def test_bandwidth_and_duration():
    assert parse_bandwidth("4TB/s") == 4e12
    assert parse_bandwidth("25GiB/s") == 25 * 2**30
    with pytest.raises(UsageError):
        parse_bandwidth("4TB")
    assert parse_duration("500ms") == pytest.approx(0.5)
    assert parse_duration("5m") == 300
    assert parse_duration("2.5 s") == 2.5
    with pytest.raises(UsageError, match="no time unit"):
        parse_duration("500")


def test_byte_quantity_detection_and_formatting():
    assert is_byte_quantity("80GB") and is_byte_quantity("1TiB")
    assert not is_byte_quantity("3M") and not is_byte_quantity("3")
    assert format_count(12_345_678) == "12.3M"
    assert format_bytes(1.5e12) == "1.5 TB"


def test_count_says_one_in_the_singular():
    from xmemplan.units import count

    assert count(1, "GPU") == "1 GPU"
    assert count(0, "GPU") == "0 GPUs"
    assert count(2801, "request") == "2,801 requests"
    assert count(1, "empty file") == "1 empty file"
    assert count(3, "query", "queries") == "3 queries"
