"use strict";
// contender.js: one Node process of the contention test. For each key it
// runs a loop of `rounds` lock cycles with npm redis-lock: acquire, tell the
// Go test's detector "enter", hold 1–5 ms, tell it "leave" (and wait for
// its ack, so the detector has recorded the leave before the lock is
// released), release. Every `abandonEvery`-th round instead acquires with a
// short lease and never releases, like a holder that crashed at once, so the
// others must take the expired lock over with GETSET. At the end it prints
// one JSON line of counts to stdout.
//
//   node contender.js '{"redis":"127.0.0.1:6379","detector":"127.0.0.1:7000","who":"node1",
//     "names":["interop.a"],"rounds":20,"timeout":2000,"abandonEvery":0,"abandonTimeout":50,
//     "holdMin":1,"holdMax":5,"retryDelay":5}'
//
// redis-lock prefixes every name with "lock.", so the name "interop.a" is the
// Redis key "lock.interop.a".

const net = require("net");
const { connect, config, die, hostPort } = require("./common");

const cfg = config();

// detector speaks the Go test's line protocol: each request is answered by
// "ok" in order, so a FIFO of waiting promises pairs them up.
function detector(addr) {
  const socket = net.connect(hostPort(addr));
  socket.setNoDelay(true);
  const waiting = [];
  let buffered = "";
  socket.on("data", (chunk) => {
    buffered += chunk;
    let nl;
    while ((nl = buffered.indexOf("\n")) >= 0) {
      const line = buffered.slice(0, nl);
      buffered = buffered.slice(nl + 1);
      const w = waiting.shift();
      if (line === "ok") w.resolve();
      else w.reject(new Error("detector: " + line));
    }
  });
  socket.on("error", die);
  return {
    tell(line) {
      return new Promise((resolve, reject) => {
        waiting.push({ resolve, reject });
        socket.write(line + "\n");
      });
    },
    close() {
      socket.end();
    },
  };
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function loop(lock, det, name, stats) {
  const key = "lock." + name;
  for (let round = 1; round <= cfg.rounds; round++) {
    if (cfg.abandonEvery > 0 && round % cfg.abandonEvery === 0) {
      await lock.acquire(name, cfg.abandonTimeout); // and never release: a crash right after acquiring
      stats.abandoned++;
      continue;
    }
    const done = await lock.acquire(name, cfg.timeout);
    await det.tell("enter " + key + " " + cfg.who);
    stats.acquired++;
    await sleep(cfg.holdMin + Math.floor(Math.random() * (cfg.holdMax - cfg.holdMin + 1)));
    await det.tell("leave " + key + " " + cfg.who);
    await lock.release(done);
  }
}

async function main() {
  const lock = connect(cfg.redis, cfg.retryDelay);
  const det = detector(cfg.detector);
  const stats = { who: cfg.who, acquired: 0, abandoned: 0 };
  await Promise.all(cfg.names.map((name) => loop(lock, det, name, stats)));
  det.close();
  Object.assign(stats, lock.counts);
  process.stdout.write(JSON.stringify(stats) + "\n");
  lock.client.quit();
}

main().catch(die);
