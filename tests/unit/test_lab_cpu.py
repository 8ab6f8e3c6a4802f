"""lab/cpu.py: the CPU times the benches divide by what a run moved."""

import os
import time

from lab.cpu import cpu_seconds, machine_busy


def _spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_a_process_and_the_machine_count_the_cpu_this_test_burns():
    me0, all0 = cpu_seconds(os.getpid()), machine_busy()
    _spin(0.3)
    me, machine = cpu_seconds(os.getpid()) - me0, machine_busy() - all0
    assert 0.25 <= me <= 1.0  # clock ticks: 10 ms resolution
    assert machine >= me - 0.05  # the machine's busy time holds this process's


def test_processes_add_up_and_one_that_is_gone_counts_nothing():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    assert cpu_seconds(pid) == 0.0
    assert cpu_seconds() == 0.0
    me = cpu_seconds(os.getpid())
    assert me <= cpu_seconds(os.getpid(), pid) <= me + 0.05
