import signal

import pytest

from fedstrata.netlab.lab import Lab
from tests.netlab.fakes import FakeRunner


def _lab():
    run = FakeRunner()
    return Lab(runner=run, prefix="fsl-42-"), run


def test_a_link_is_built_inside_its_two_namespaces_only():
    lab, run = _lab()
    up, low = lab.namespace("cloud"), lab.namespace("client-0")
    link = lab.link(up, low)
    assert (link.upper_dev, link.lower_dev) == ("fsl42-0a", "fsl42-0b")
    assert (link.upper_ip, link.lower_ip) == ("10.203.0.1", "10.203.0.2")
    for argv in run.argvs():
        # never a command on the root namespace's interfaces: each names a lab namespace
        joined = " ".join(argv)
        assert argv[:3] in (["ip", "netns", "add"], ["ip", "link", "add"]) or (
            "fsl-42-" in joined
        ), argv
        if argv[:3] == ["ip", "link", "add"]:
            assert argv[argv.index("netns") + 1] == up and argv[-1] == low
    addrs = [a for a in run.argvs() if "addr" in a]
    assert [(a[2], a[5], a[7]) for a in addrs] == [
        (up, "10.203.0.1/30", "fsl42-0a"),
        (low, "10.203.0.2/30", "fsl42-0b"),
    ]


def test_shape_sets_both_ends_and_partition_restores_the_loss():
    lab, run = _lab()
    link = lab.link(lab.namespace("cloud"), lab.namespace("client-0"))
    run.calls.clear()
    lab.shape(link, 10, 0.05)
    tbfs = [a for a in run.argvs() if a[0] == "tc"]
    assert [a[2] for a in tbfs] == ["fsl-42-cloud", "fsl-42-client-0"]
    nft = [i for a, i in run.calls if i and "loss_" in i]
    assert len(nft) == 2 and all("< 50000 " in i for i in nft)
    run.calls.clear()
    lab.partition(link, cut=True)
    assert all("numgen" not in i and " drop" in i for _, i in run.calls)
    run.calls.clear()
    lab.partition(link, cut=False)
    assert all("< 50000 " in i for _, i in run.calls)


def test_close_deletes_every_namespace_even_when_one_fails():
    run = FakeRunner(fail_on="fsl-42-client-0", pids={"fsl-42-cloud": []})
    lab = Lab(runner=run, prefix="fsl-42-")
    run.fail_on = None
    lab.namespace("cloud")
    lab.namespace("client-0")
    run.fail_on = "fsl-42-client-0"
    problems = lab.close()
    assert len(problems) == 1 and "fsl-42-client-0" in problems[0]
    assert run.namespaces == ["fsl-42-client-0"]  # the refused one, reported
    assert ["ip", "netns", "delete", "fsl-42-cloud"] in run.argvs()


def test_the_context_cleans_up_and_restores_signal_handlers():
    before = signal.getsignal(signal.SIGTERM)
    lab, run = _lab()
    with lab:
        assert signal.getsignal(signal.SIGTERM) == lab._on_signal
        lab.namespace("cloud")
    assert run.namespaces == [] and lab.namespaces == []
    assert signal.getsignal(signal.SIGTERM) == before
    assert lab.leftovers() == []


def test_sigterm_inside_the_context_cleans_up_then_exits():
    lab, run = _lab()

    def body():
        with lab:
            lab.namespace("cloud")
            signal.raise_signal(signal.SIGTERM)

    with pytest.raises(SystemExit) as exc:
        body()
    assert exc.value.code == 128 + signal.SIGTERM
    assert run.namespaces == []
