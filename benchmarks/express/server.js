// express + express-rate-limit on 127.0.0.1, for benchmarks/limiters.py (limiter_servers.py
// starts it).
//
//   node server.js PORT MODE [LIMIT] [WINDOW_MS]      (or PORT, MODE, LIMIT, WINDOW_MS in env)
//
// MODE: draft-6, draft-7, draft-8 (standardHeaders: MODE, legacyHeaders: false) or legacy
// (legacyHeaders: true, standardHeaders: false: X-RateLimit-*).  GET /work answers "ok\n",
// limited by express-rate-limit's default MemoryStore: a fixed window of WINDOW_MS starting
// at the first hit (every hit counts, denied or not), keyed by the client's IP (all our
// clients are 127.0.0.1: one shared quota).  Its 429s carry Retry-After.  GET /healthz is
// not limited (the starter's readiness check).  Each /work answer is logged on stdout as
// "<epoch seconds, ms> <status>" when it is sent: the arrivals the benchmark counts.
"use strict";

const express = require("express");
const { rateLimit } = require("express-rate-limit");

const port = Number(process.argv[2] ?? process.env.PORT ?? 0);
const mode = process.argv[3] ?? process.env.MODE ?? "draft-8";
const limit = Number(process.argv[4] ?? process.env.LIMIT ?? 10);
const windowMs = Number(process.argv[5] ?? process.env.WINDOW_MS ?? 1000);

const MODES = {
  "draft-6": { standardHeaders: "draft-6", legacyHeaders: false },
  "draft-7": { standardHeaders: "draft-7", legacyHeaders: false },
  "draft-8": { standardHeaders: "draft-8", legacyHeaders: false },
  legacy: { standardHeaders: false, legacyHeaders: true },
};
if (!(mode in MODES)) {
  console.error(`mode must be one of ${Object.keys(MODES).join(", ")}, got ${mode}`);
  process.exit(2);
}

const app = express();
app.disable("x-powered-by");
app.disable("etag");

app.get("/healthz", (_request, response) => {
  response.type("text/plain").send("ok\n");
});

app.use("/work", (_request, response, next) => {
  response.on("finish", () => {
    process.stdout.write(`${(Date.now() / 1000).toFixed(3)} ${response.statusCode}\n`);
  });
  next();
});
app.use("/work", rateLimit({ limit, windowMs, ...MODES[mode] }));
app.get("/work", (_request, response) => {
  response.type("text/plain").send("ok\n");
});

const server = app.listen(port, "127.0.0.1", () => {
  console.error(`express-rate-limit ${mode} ${limit}/${windowMs}ms on 127.0.0.1:${server.address().port}`);
});
server.keepAliveTimeout = 120_000; // the clients keep connections through long waits
server.headersTimeout = 121_000;
for (const signal of ["SIGTERM", "SIGINT"]) {
  process.on(signal, () => process.exit(0));
}
