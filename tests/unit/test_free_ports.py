"""Ports for the servers: handed out before a server binds them (Triton binds only after
loading its model), so they come from below the kernel's ephemeral range, which every
outgoing connection and bind(0) draws from; nothing this process handed out comes back."""

import socket

from kfp_llmops.components.deploy import processes


def test_ports_are_below_the_ephemeral_range_distinct_and_free():
    low = processes._ephemeral_low()
    seen = set()
    for _ in range(100):
        ports = processes.free_ports(3)
        assert len(set(ports)) == 3 and all(1024 <= p < low for p in ports)
        assert not seen & set(ports)  # not handed out again while a server may still be binding it
        seen |= set(ports)
        for port in ports:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", port))


def test_a_port_in_use_is_not_handed_out(monkeypatch):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        picks = iter([taken, taken, taken + 1 if taken + 1 < 65536 else taken - 1])
        monkeypatch.setattr(processes, "_ephemeral_low", lambda: 65536)
        monkeypatch.setattr(processes.random.SystemRandom, "randrange", lambda self, a, b: next(picks))
        assert processes.free_ports(1) != [taken]
