"use strict";
// holder.js: one lock taken with npm redis-lock and held until the Go test
// says so, for the crash-recovery and no-stealing tests. It prints a line
// for every SETNX and GETSET reply ("setnx 0", "getset <old value>"), so
// the test can see it being refused and how it got in, then
// "acquired <value> <Date.now()>" with the value it holds. It releases when
// it reads "release" on stdin (printing "released"), and otherwise holds
// until it is killed or stdin closes.
//
//   node holder.js '{"redis":"127.0.0.1:6379","name":"interop.crash","timeout":1000,"retryDelay":5}'

const readline = require("readline");
const { connect, config, die } = require("./common");

const cfg = config();
const say = (line) => process.stdout.write(line + "\n");

async function main() {
  const lock = connect(cfg.redis, cfg.retryDelay, (cmd, reply) => say(cmd + " " + reply));
  const done = await lock.acquire(cfg.name, cfg.timeout);
  const now = Date.now();
  // Nobody else writes this key while we hold it in these tests, so GET
  // shows the value redis-lock wrote (it keeps it to itself).
  lock.client.get("lock." + cfg.name, (err, value) => {
    if (err) die(err);
    say("acquired " + value + " " + now);
  });
  const input = readline.createInterface({ input: process.stdin });
  input.on("line", async (line) => {
    if (line.trim() !== "release") return;
    await lock.release(done).catch(die);
    say("released");
  });
  input.on("close", () => {
    lock.client.quit();
    input.close();
  });
}

main().catch(die);
