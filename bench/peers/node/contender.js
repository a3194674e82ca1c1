// node-redlock contender of the hilock peer benchmark (bench/peers/run.sh).
// Same command line and JSON output as every other contender (see
// bench/peers/contender.c): node contender.js SCENARIO key=value...
// redlock 4 (npm's "latest") over ioredis, used as its README shows:
// redlock.lock(resource, ttl) then lock.unlock(); a waiter retries every
// retryDelay (200 ms, +-200 ms jitter; retryCount -1 = until it gets it).
'use strict';
const fs = require('fs');
const readline = require('readline');
const Redis = require('ioredis');
const Redlock = require('redlock');

const LEASE_MS = 10000;
const A = {};
for (const a of process.argv.slice(3)) {
  const i = a.indexOf('=');
  A[a.slice(0, i)] = a.slice(i + 1);
}
const now = () => process.hrtime.bigint(); // CLOCK_MONOTONIC: system-wide
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const emit = (o) => process.stdout.write((typeof o === 'string' ? o : JSON.stringify(o)) + '\n');

function redlockFor(urls, retryCount) {
  const clients = urls.map((u) => new Redis(u, { enableOfflineQueue: true }));
  return { clients, redlock: new Redlock(clients, { retryCount }) };
}

function pairsJson(lat, elapsed) {
  lat.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  const n = lat.length;
  return {
    pairs_per_s: (n * 1e9) / Number(elapsed),
    p50_us: Number(lat[n >> 1]) / 1e3,
    p99_us: Number(lat[Math.floor((n * 99) / 100)]) / 1e3,
  };
}

async function pairs(urls) {
  const { clients, redlock } = redlockFor(urls, 10);
  const n = Number(A.n);
  const warm = Number(A.warm || 200);
  const lat = new Array(n);
  let t0 = 0n;
  for (let i = -warm; i < n; i++) {
    const s = now();
    if (i === 0) t0 = s;
    const lock = await redlock.lock(A.key, LEASE_MS);
    await lock.unlock();
    if (i >= 0) lat[i] = now() - s;
  }
  emit(pairsJson(lat, now() - t0));
  clients.forEach((c) => c.disconnect());
}

async function threads(urls) {
  const { clients, redlock } = redlockFor(urls, 10);
  const n = Number(A.threads || 16);
  await clients[0].ping();
  const start = now();
  const end = start + BigInt(A.ms) * 1000000n;
  let count = 0;
  await Promise.all(
    Array.from({ length: n }, async (_, i) => {
      const key = `${A.key}:${i}`;
      while (now() < end) {
        const lock = await redlock.lock(key, LEASE_MS);
        await lock.unlock();
        count++;
      }
    }),
  );
  emit({ pairs_per_s: (count * 1e9) / Number(now() - start) });
  clients.forEach((c) => c.disconnect());
}

function readCounter(fd) {
  const b = Buffer.alloc(8);
  fs.readSync(fd, b, 0, 8, 0);
  return b.readBigInt64LE(0);
}

async function handoff(urls) {
  const { clients, redlock } = redlockFor(urls, -1);
  const fd = fs.openSync(A.counter, 'r+');
  const gap = BigInt(A.gap || 1);
  const hold = Number(A.hold_us || 0) / 1000;
  await clients[0].ping();
  emit('ready');
  const rl = readline.createInterface({ input: process.stdin });
  await new Promise((r) => rl.once('line', r));
  rl.close();
  const end = now() + BigInt(A.ms) * 1000000n;
  const events = [];
  for (;;) {
    const req = now();
    const lock = await redlock.lock(A.key, LEASE_MS);
    const acq = now();
    const mine = readCounter(fd) + 1n;
    const b = Buffer.alloc(8);
    b.writeBigInt64LE(mine, 0);
    fs.writeSync(fd, b, 0, 8, 0);
    if (hold) await sleep(hold);
    const unl = now();
    await lock.unlock();
    if (acq >= end) break;
    events.push(`[${req},${acq},${unl}]`);
    while (readCounter(fd) < mine + gap && now() < end) await sleep(1);
  }
  emit(`{"events": [${events.join(',')}]}`);
  clients.forEach((c) => c.disconnect());
}

async function main() {
  const urls = A.urls ? A.urls.split(',') : [A.url];
  switch (process.argv[2]) {
    case 'pairs':
    case 'redlock':
      return pairs(urls);
    case 'threads':
      return threads(urls);
    case 'handoff':
      return handoff(urls);
    default:
      throw new Error(`node-redlock has no ${process.argv[2]} scenario`);
  }
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
