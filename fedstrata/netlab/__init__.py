"""Run a scenario's federation on the Linux network stack, to check the simulator's links.

The topology of a scenario is built out of network namespaces joined by veth pairs
(:mod:`.layout`, :mod:`.lab`); each link is shaped in the kernel: a token bucket
(``tc ... tbf``) for bandwidth and an nftables random drop for packet loss, on both
ends of its veth (:mod:`.commands`); a real Mosquitto runs where the simulator puts a
broker and every node is a real ``fedstrata node`` process in its own namespace
(:mod:`.deployment`). Byte counters come from the kernel (:mod:`.counters`); round
times from the root's ``rounds.csv`` (:mod:`.compare`). Every namespace is named with
a prefix unique to the process (``fsl-<pid>-``), and removed on every exit path.

Needs root (``CAP_NET_ADMIN`` and ``CAP_SYS_ADMIN``), ``ip``, ``tc``, ``nft`` and
``mosquitto``. This kernel has no ``netem``: links have no added delay.
"""
