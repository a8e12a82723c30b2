"""Ports handed out for throwaway servers are claimed on the host (embedded/ports.py): a port another
live process claimed is not handed out again, one whose claimant is gone is."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from pgbridge.embedded.ports import claim_on_host, free_port

HOLD = ("import sys; from pathlib import Path; from pgbridge.embedded.ports import claim_on_host; "
        "print(claim_on_host(int(sys.argv[1]), Path(sys.argv[2])), flush=True); sys.stdin.read()")


def test_a_port_claimed_by_a_live_process_is_refused_and_taken_over_once_it_is_gone(tmp_path: Path) -> None:
    claims = tmp_path / "claims"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, "23456", str(claims)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "True"
        # when: this process wants the port the live one claimed
        assert not claim_on_host(23456, claims)
        assert claim_on_host(23457, claims)  # any other is free
    finally:
        holder.communicate("")  # it exits
    # then: its claim is stale, and taken over
    assert claim_on_host(23456, claims)
    assert (claims / "23456").read_text(encoding="ascii") != ""


def test_without_a_usable_claims_directory_every_port_counts_as_unclaimed(tmp_path: Path) -> None:
    not_a_directory = tmp_path / "file"
    not_a_directory.write_text("", encoding="ascii")
    assert claim_on_host(23458, not_a_directory)


def test_free_ports_differ_and_each_is_claimed() -> None:
    ports = {free_port() for _ in range(20)}
    assert len(ports) == 20


def test_a_claim_left_half_written_is_stale(tmp_path: Path) -> None:
    claims = tmp_path / "claims"
    claims.mkdir()
    (claims / "23459").write_text("", encoding="ascii")  # its process was killed while writing it
    assert claim_on_host(23459, claims)
