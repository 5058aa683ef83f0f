from fedstrata.netlab.cleanup import list_namespaces, remove_leftovers, remove_namespace
from tests.netlab.fakes import FakeRunner


def test_leftovers_of_dead_labs_are_removed_processes_first():
    run = FakeRunner(
        namespaces=["fsl-111-cloud", "fsl-111-client-0", "fsl-222-cloud", "docker-x", "fsl-abc"],
        pids={"fsl-111-cloud": [5001, 5002]},
    )
    killed = []
    removed = remove_leftovers(run, alive=lambda pid: pid == 222, kill=killed.append)
    assert removed == ["fsl-111-cloud", "fsl-111-client-0"]
    assert killed == [5001, 5002]
    # a running lab (222), a name no lab made, another tool's namespace: untouched
    assert run.namespaces == ["fsl-222-cloud", "docker-x", "fsl-abc"]
    deletes = [a for a in run.argvs() if a[:3] == ["ip", "netns", "delete"]]
    assert [a[3] for a in deletes] == removed
    # the processes were killed before their namespace was deleted
    order = [a[:3] for a in run.argvs() if a[1] == "netns" and a[2] in ("pids", "delete")]
    assert order[:2] == [["ip", "netns", "pids"], ["ip", "netns", "delete"]]


def test_a_labs_own_prefix_removes_its_namespaces_even_while_it_runs():
    run = FakeRunner(namespaces=["fsl-222-cloud", "fsl-2220-cloud", "fsl-333-cloud"])
    removed = remove_leftovers(run, "fsl-222-", alive=lambda pid: True, kill=lambda p: None)
    assert removed == ["fsl-222-cloud"]
    assert run.namespaces == ["fsl-2220-cloud", "fsl-333-cloud"]


def test_no_namespace_at_all():
    run = FakeRunner()
    assert list_namespaces(run) == []
    assert remove_leftovers(run, alive=lambda pid: False) == []


def test_remove_namespace_kills_what_runs_inside():
    run = FakeRunner(namespaces=["fsl-9-x"], pids={"fsl-9-x": [77]})
    killed = []
    remove_namespace(run, "fsl-9-x", kill=killed.append)
    assert killed == [77] and run.namespaces == []
