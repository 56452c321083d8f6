// The real service for the tests: the release binary (and the chaos proxy) on
// free ports with a temporary database, killed and removed when the test ends,
// failed or not (`startService(t)` registers the clean-up with `t.after`). The
// binaries come from IDEM_BIN_DIR (scripts/test_clients.sh sets it),
// else the repository's target/release.

import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync, openSync, closeSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

export const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");
const BIN_DIR = process.env.IDEM_BIN_DIR ?? join(REPO, "target", "release");
export const MATRIX = JSON.parse(readFileSync(join(REPO, "clients", "retry-matrix.json"), "utf8"));
export const VECTORS = JSON.parse(readFileSync(join(REPO, "clients", "key-vectors.json"), "utf8"));
const STARTUP_DEADLINE_MS = 60_000;

/** Poll `check` until it returns something truthy, or fail naming `what`. */
export async function eventually(what, check, withinMs = 30_000) {
  const deadline = Date.now() + withinMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** A child that prints one start-up line naming its address. */
async function startProcess(argv, log, marker) {
  const fd = openSync(log, "a");
  const child = spawn(argv[0], argv.slice(1), { stdio: ["ignore", "pipe", fd] });
  closeSync(fd);
  const lines = createInterface({ input: child.stdout });
  const line = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${argv[0]} printed no start-up line`)), STARTUP_DEADLINE_MS);
    lines.once("line", (text) => {
      clearTimeout(timer);
      resolve(text);
    });
    child.once("exit", (code) => reject(new Error(`${argv[0]} exited ${code}: ${readFileSync(log, "utf8")}`)));
  });
  const match = new RegExp(`${marker} on http://([0-9.]+:\\d+)`).exec(line);
  if (!match) throw new Error(`unexpected start-up line ${line}`);
  return { child, addr: match[1], log };
}

async function kill(proc) {
  if (proc.child.exitCode === null && proc.child.signalCode === null) {
    const exited = new Promise((r) => proc.child.once("exit", r));
    proc.child.kill("SIGKILL");
    await exited;
  }
}

export class Service {
  constructor(folder, flags) {
    this.folder = folder;
    this.db = join(folder, "calls.db");
    this.flags = flags;
    this.token = null;
    this.children = [];
  }

  async start(port = 0) {
    const argv = [join(BIN_DIR, "idempotent-tool"), "--port", String(port), "--db", this.db, "--access-log", "off", ...this.flags];
    this.server = await startProcess(argv, join(this.folder, "server.log"), "idempotent-tool listening");
    this.children.push(this.server);
    return this;
  }

  get baseUrl() {
    return `http://${this.server.addr}`;
  }

  /** SIGKILL the server, then start it again on the same port and database. */
  async killAndRestart() {
    const port = Number(this.server.addr.split(":")[1]);
    await kill(this.server);
    await this.start(port);
  }

  /** A chaos proxy in front of the server; its base URL. */
  async proxy(mode, ...flags) {
    const argv = [join(BIN_DIR, "chaos_proxy"), "--listen", "127.0.0.1:0", "--upstream", this.server.addr, "--mode", mode, ...flags];
    const proxy = await startProcess(argv, join(this.folder, "proxy.log"), "chaos_proxy listening");
    this.children.push(proxy);
    return `http://${proxy.addr}`;
  }

  async #get(path) {
    const headers = this.token ? { authorization: `Bearer ${this.token}` } : {};
    const response = await fetch(this.baseUrl + path, { headers });
    return response;
  }

  async post(key, tool, args, wait = 0) {
    const headers = { "idempotency-key": key };
    if (this.token) headers.authorization = `Bearer ${this.token}`;
    const response = await fetch(`${this.baseUrl}/v1/tool-calls?wait=${wait}`, {
      method: "POST",
      headers,
      body: JSON.stringify({ tool, args }),
    });
    return { status: response.status, body: await response.json() };
  }

  async callsOf(tool) {
    const body = await (await this.#get(`/v1/tool-calls?tool=${tool}&limit=500`)).json();
    if (body.next !== null) throw new Error("one page holds every call of a test");
    return body.calls;
  }

  async effects() {
    return (await (await this.#get("/stats")).json()).effects;
  }

  async queued() {
    const text = await (await this.#get("/metrics")).text();
    const match = /^idempotent_tool_queued_calls (\S+)$/m.exec(text);
    return match ? Number(match[1]) : 0;
  }

  logs() {
    return this.children.map((c) => `--- ${c.log}\n${readFileSync(c.log, "utf8").slice(-4000)}`).join("\n");
  }

  async stop() {
    for (const child of this.children) await kill(child);
    rmSync(this.folder, { recursive: true, force: true });
  }
}

/** A server of the test's own, stopped and removed when the test ends (its logs shown if it failed). */
export async function startService(t, ...flags) {
  const folder = mkdtempSync(join(tmpdir(), "idem-ts-"));
  const service = new Service(folder, flags);
  t.after(async () => {
    if (t.passed === false) t.diagnostic(service.logs());
    await service.stop();
  });
  return service.start();
}

/** An --auth-file with one admin tenant, in a temp folder removed when the test ends. */
export function authFile(t, tenant, token) {
  const folder = mkdtempSync(join(tmpdir(), "idem-ts-auth-"));
  t.after(() => rmSync(folder, { recursive: true, force: true }));
  const path = join(folder, "auth.json");
  const digest = createHash("sha256").update(token).digest("hex");
  writeFileSync(path, JSON.stringify({ tenants: { [tenant]: { token_sha256: digest, admin: true } } }));
  return path;
}
