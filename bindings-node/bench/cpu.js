'use strict';
// CPU time of the processes of a benchmark run, per thread group, from
// /proc/<pid>/task/*/stat (Linux; elsewhere every figure is null): what bounds
// a line on a small machine, where the load generator, the app's event loop,
// polylimit's runtime thread and redis-server share the cores. Not a test.
const fs = require('node:fs');
const os = require('node:os');

const TICK = 100; // USER_HZ: clock ticks per second in /proc/*/stat

/** CPU ticks of `pid`'s threads: { main, runtime (polylimit's tokio threads), other }. */
function ticks(pid) {
  const out = { main: 0, runtime: 0, other: 0 };
  let tasks;
  try {
    tasks = fs.readdirSync(`/proc/${pid}/task`);
  } catch {
    return null;
  }
  for (const tid of tasks) {
    let stat;
    try {
      stat = fs.readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
    } catch {
      continue; // the thread ended
    }
    const close = stat.lastIndexOf(')');
    const name = stat.slice(stat.indexOf('(') + 1, close);
    const fields = stat.slice(close + 2).split(' ');
    const used = Number(fields[11]) + Number(fields[12]); // utime + stime
    if (Number(tid) === pid) out.main += used;
    else if (name.startsWith('polylimit')) out.runtime += used;
    else out.other += used;
  }
  return out;
}

/** Busy and total jiffies of the whole machine (/proc/stat), or null. */
function machine() {
  try {
    const cpu = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number);
    const idle = cpu[3] + (cpu[4] || 0);
    const total = cpu.reduce((a, b) => a + b, 0);
    return { busy: total - idle, total };
  } catch {
    return null;
  }
}

/**
 * Starts measuring the processes `pids` ({ label: pid }); `stop(n)` returns, per
 * label, the µs of CPU per unit of work (n units done) of each thread group,
 * the cores all of them kept busy, and the cores the whole machine kept busy.
 */
function sample(pids) {
  const before = Object.fromEntries(Object.entries(pids).map(([label, pid]) => [label, ticks(pid)]));
  const started = process.hrtime.bigint();
  const whole = machine();
  return {
    stop(n) {
      const secs = Number(process.hrtime.bigint() - started) / 1e9;
      const perUnit = {};
      let total = 0;
      for (const [label, pid] of Object.entries(pids)) {
        const a = before[label];
        const b = ticks(pid);
        if (!a || !b) return null;
        perUnit[label] = {};
        for (const group of ['main', 'runtime', 'other']) {
          const used = (b[group] - a[group]) / TICK;
          total += used;
          perUnit[label][group] = (used * 1e6) / n;
        }
      }
      const of = os.cpus().length;
      const now = machine();
      // The cores the whole machine kept busy (these processes and anything else running).
      const busy = whole && now ? ((now.busy - whole.busy) / (now.total - whole.total)) * of : null;
      return { perUnit, cores: total / secs, busy, of };
    },
  };
}

/** µs with one decimal. */
const us = (x) => x.toFixed(1);

/** "main 2.1 + runtime 3.0 + redis 6.6 = 11.7 µs" from one sample's groups. */
function describe(groups) {
  const parts = [];
  let sum = 0;
  for (const [name, value] of groups) {
    if (value >= 0.05) {
      parts.push(`${name} ${us(value)}`);
      sum += value;
    }
  }
  return `${parts.join(' + ')} = ${us(sum)} µs`;
}

module.exports = { sample, describe };
