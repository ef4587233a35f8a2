"""Real mode through the fake `xmem` SDK: allocation per bank, SDK errors -> clear messages."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from conftest import forget_fake_xmem

from xmemplan.backends import create_backend
from xmemplan.backends.media import XMEM_UNAVAILABLE
from xmemplan.errors import ExitCode, NotAvailableError

PAGE = 4096


def test_allocates_once_per_bank_and_copies_with_pointers(fake_xmem_sdk):
    b = create_backend(mode="real", capacity_bytes=8 * PAGE, banks=4, page_bytes=PAGE)
    import xmem
    from cuda.bindings import runtime

    assert xmem.ALLOCATIONS == [(0, 2 * PAGE), (1, 2 * PAGE), (2, 2 * PAGE), (3, 2 * PAGE)]
    data = np.arange(PAGE, dtype=np.uint8)
    assert b.set("k", data)
    np.testing.assert_array_equal(b.get("k"), data)
    kinds = {k for k, _ in runtime.COPIES}
    assert kinds == {int(runtime.cudaMemcpyKind.cudaMemcpyHostToDevice),
                     int(runtime.cudaMemcpyKind.cudaMemcpyDeviceToHost)}


def test_banks_capped_by_hardware(fake_xmem_sdk, monkeypatch):
    monkeypatch.setenv("FAKE_XMEM_BANKS", "2")
    b = create_backend(mode="real", capacity_bytes=8 * PAGE, banks=8, page_bytes=PAGE)
    assert b._medium.banks == 2


@pytest.mark.parametrize("how, words", [
    ("oserror", "OSError: MTier shared library not found"),
    ("service", "MTier service did not start"),
])
def test_import_failures_become_not_available(fake_xmem_sdk, monkeypatch, how, words):
    monkeypatch.setenv("FAKE_XMEM_IMPORT", how)
    with pytest.raises(NotAvailableError) as info:
        create_backend(mode="real", page_bytes=PAGE)
    assert info.value.exit_code == ExitCode.NOT_AVAILABLE
    assert info.value.message.startswith(XMEM_UNAVAILABLE)
    assert words in info.value.message


def test_no_sdk_at_all_is_not_available(monkeypatch):
    forget_fake_xmem()
    monkeypatch.setattr(sys, "path", [p for p in sys.path if "fake_xmem" not in p])
    with pytest.raises(NotAvailableError, match=XMEM_UNAVAILABLE):
        create_backend(mode="real", page_bytes=PAGE)


def test_tier_not_ready(fake_xmem_sdk, monkeypatch):
    monkeypatch.setenv("FAKE_XMEM_NOT_READY", "1")
    with pytest.raises(NotAvailableError, match="not ready"):
        create_backend(mode="real", page_bytes=PAGE)


def test_out_of_memory_names_the_bank(fake_xmem_sdk, monkeypatch):
    monkeypatch.setenv("FAKE_XMEM_BANK_BYTES", str(PAGE))
    with pytest.raises(NotAvailableError, match="bank 0 has 4,096 bytes free"):
        create_backend(mode="real", capacity_bytes=64 * PAGE, banks=4, page_bytes=PAGE)


def test_copy_failure_fails_the_page_not_the_store(fake_xmem_sdk):
    b = create_backend(mode="real", capacity_bytes=4 * PAGE, banks=2, page_bytes=PAGE)
    from cuda.bindings import runtime

    runtime.FAIL_COPIES = 1
    assert not b.set(1, np.ones(PAGE, dtype=np.uint8))
    assert not b.exists(1)
    b.check_consistency()
    assert b.set(1, np.ones(PAGE, dtype=np.uint8))
    runtime.FAIL_COPIES = 1
    assert b.get(1) is None  # a failed read is a miss, the page stays
    assert b.exists(1)
    np.testing.assert_array_equal(b.get(1), np.ones(PAGE, dtype=np.uint8))


def test_auto_mode_uses_hardware_when_present(fake_xmem_sdk, monkeypatch, tmp_path):
    lib = tmp_path / "libmtier.so"
    lib.write_bytes(b"")
    monkeypatch.setenv("MTIER_LIB_PATH", str(lib))
    assert create_backend(mode="auto", page_bytes=PAGE, capacity_bytes=8 * PAGE).mode == "real"
    monkeypatch.setenv("MTIER_LIB_PATH", str(tmp_path / "missing.so"))
    assert create_backend(mode="auto", page_bytes=PAGE).mode == "emulate"


def test_auto_mode_falls_back_when_the_sdk_fails(fake_xmem_sdk, monkeypatch, tmp_path):
    lib = tmp_path / "libmtier.so"
    lib.write_bytes(b"")
    monkeypatch.setenv("MTIER_LIB_PATH", str(lib))
    monkeypatch.setenv("FAKE_XMEM_IMPORT", "service")
    assert create_backend(mode="auto", page_bytes=PAGE).mode == "emulate"
