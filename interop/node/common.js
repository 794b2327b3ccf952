"use strict";
// Shared by contender.js and holder.js: a redis v3 client whose SETNX and
// GETSET replies are counted (redis-lock does not expose its attempts), and
// redis-lock on top of it exactly as an application would use it.

const redis = require("redis");
const redisLock = require("redis-lock");

// hostPort splits "127.0.0.1:6379".
function hostPort(addr) {
  const i = addr.lastIndexOf(":");
  return { host: addr.slice(0, i), port: Number(addr.slice(i + 1)) };
}

// connect returns a client and redis-lock's lock function. onReply, when
// given, sees every SETNX and GETSET reply: the holder prints them so the
// Go test can tell a refused attempt from a takeover.
function connect(addr, retryDelay, onReply) {
  const { host, port } = hostPort(addr);
  // No reconnection: a test whose server vanished should fail, not spin.
  const client = redis.createClient({ host, port, retry_strategy: () => undefined });
  const counts = { setnxWon: 0, setnxRefused: 0, getset: 0 };
  for (const name of ["setnx", "getset"]) {
    const original = client[name].bind(client);
    client[name] = function (key, value, cb) {
      return original(key, value, function (err, reply) {
        if (!err) {
          if (name === "getset") counts.getset++;
          else if (Number(reply) === 1) counts.setnxWon++;
          else counts.setnxRefused++;
          if (onReply) onReply(name, reply, value);
        }
        cb(err, reply);
      });
    };
  }
  const lock = redisLock(client, retryDelay);
  // acquire resolves with redis-lock's release function (its "done").
  const acquire = (name, timeout) => new Promise((resolve) => lock(name, timeout, resolve));
  const release = (done) => new Promise((resolve, reject) => done((err) => (err ? reject(err) : resolve())));
  return { client, counts, acquire, release };
}

// config parses the one JSON argument both programs take.
function config() {
  if (process.argv.length !== 3) {
    process.stderr.write("usage: node " + process.argv[1] + " '<json config>'\n");
    process.exit(2);
  }
  return JSON.parse(process.argv[2]);
}

// die reports an unexpected error to the Go test and exits non-zero.
function die(err) {
  process.stderr.write(String((err && err.stack) || err) + "\n");
  process.exit(1);
}

module.exports = { connect, config, die, hostPort };
