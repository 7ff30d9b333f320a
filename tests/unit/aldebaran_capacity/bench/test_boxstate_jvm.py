"""A JVM's compiler and collector threads as roles of their own (aldebaran_capacity.bench.boxstate): read from a
real JVM's /proc/<pid>/task, and split off its role in the box sampler without changing the process's total."""

from __future__ import annotations

import shutil
import subprocess
import time

import psutil
import pytest

from aldebaran_capacity.bench import boxstate

pytestmark = pytest.mark.skipif(shutil.which("java") is None, reason="needs a JDK (the platform's requirement)")

# The source launcher compiles this file with javac inside the JVM: enough code for C1 to compile at once.
BUSY = """
public class Busy {
    public static void main(String[] args) throws Exception {
        long x = 0;
        for (long i = 0; i < 400_000_000L; i++) { x += i % 7; }
        System.out.println(x);
        Thread.sleep(60_000);
    }
}
"""


@pytest.fixture
def jvm(tmp_path):
    src = tmp_path / "Busy.java"
    src.write_text(BUSY)
    proc = subprocess.Popen(["java", "-XX:+UseSerialGC", str(src)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip(), "the JVM printed nothing"  # its loop is done: compiled, then ran
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_a_jvm_compiler_threads_are_read_apart(jvm):
    split = boxstate.jvm_thread_cpu(jvm.pid)
    total = sum(psutil.Process(jvm.pid).cpu_times()[:2])
    assert split["JIT"] > 0.0
    assert split["JIT"] + split["GC"] < total  # the loop's own work is the rest


def test_the_sampler_lists_a_jvm_s_jit_and_gc_beside_it_and_keeps_its_total(jvm):
    def classify(cmdline, ancestors, bench):
        return "busy JVM" if "Busy.java" in " ".join(cmdline) else "other"

    box = boxstate.BoxSampler(classify=classify)
    read = box._read()
    mine = {k: v for k, v in read.items() if k == jvm.pid or (isinstance(k, tuple) and k[0] == jvm.pid)}
    assert {box._cmd[k][0] for k in mine} == {"busy JVM", "busy JVM JIT", "busy JVM GC"}
    assert mine[(jvm.pid, "JIT")] > 0.0
    # The parts add up to the process's total (the JVM is asleep: nothing runs between the two reads).
    assert sum(mine.values()) == pytest.approx(sum(psutil.Process(jvm.pid).cpu_times()[:2]), abs=0.02)


def test_a_process_that_is_gone_has_no_threads_to_split():
    proc = subprocess.Popen(["true"])
    proc.wait()
    assert boxstate.jvm_thread_cpu(proc.pid) == {}


def test_the_sampler_gives_the_age_of_a_role_s_oldest_live_process(jvm):
    def classify(cmdline, ancestors, bench):
        return "busy JVM" if "Busy.java" in " ".join(cmdline) else "other"

    box = boxstate.BoxSampler(classify=classify)
    box._read()
    started = psutil.Process(jvm.pid).create_time()
    ages = box.ages(("busy JVM", "absent role"))
    assert set(ages) == {"busy JVM"}  # a role with no process is left out; its JIT/GC parts are not processes
    assert ages["busy JVM"] == pytest.approx(time.time() - started, abs=1.5)
    jvm.kill()
    jvm.wait()
    assert box.ages(("busy JVM",)) == {}  # gone: no age
