// Where things are for the client tests, isolated temp dirs, and finding the processes a test left.
//
// Owns: resolving the pi-repl binary (PI_REPL_BIN, else target/debug/pi-repl), the kernel's Python
// (PI_REPL_TEST_PYTHON), the npm packages of the real clients (CLIENTS_NODE_MODULES, else
// target/clients-npm/node_modules as `scripts/test` installs them), a base environment with no
// credentials, and the mark: every process a test starts carries `PI_REPL_CLIENTS_MARK=<uuid>` in
// its environment (the clients inherit it, and each client's MCP server config passes it on to
// pi-repl, whose kernel inherits it), so /proc tells which processes are still alive afterwards.

import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** tests/clients/ */
export const SUITE_DIR = resolve(fileURLToPath(import.meta.url), "../..");
/** The pi-repl checkout. */
export const REPO_DIR = resolve(SUITE_DIR, "../..");
/** The variable that marks a test's processes. */
export const MARK_VAR = "PI_REPL_CLIENTS_MARK";

/** The pi-repl binary under test. */
export function replBinary() {
	const path = process.env.PI_REPL_BIN || join(REPO_DIR, "target", "debug", "pi-repl");
	if (!existsSync(path)) throw new Error(`no pi-repl binary at ${path}: run \`cargo build\` or set PI_REPL_BIN`);
	return path;
}

/** The Python that runs kernels (a venv with ipykernel and matplotlib: `scripts/test` builds it). */
export function testPython() {
	const path = process.env.PI_REPL_TEST_PYTHON;
	if (!path || !existsSync(path)) {
		throw new Error(`PI_REPL_TEST_PYTHON (${path ?? "unset"}) is not a Python: run these tests through scripts/test, or set it`);
	}
	return path;
}

/** The node_modules folder holding the pinned clients. */
export function clientModules() {
	const candidates = [process.env.CLIENTS_NODE_MODULES, join(REPO_DIR, "target", "clients-npm", "node_modules"), join(SUITE_DIR, "node_modules")];
	for (const dir of candidates) if (dir && existsSync(join(dir, "@anthropic-ai", "claude-code"))) return dir;
	throw new Error(`the clients are not installed: run scripts/test (it runs \`npm ci\` into target/clients-npm), or set CLIENTS_NODE_MODULES`);
}

/** The version of an installed npm package. */
export function installedVersion(name) {
	return JSON.parse(readFileSync(join(clientModules(), name, "package.json"), "utf8")).version;
}

const made = [];

/**
 * A fresh temp directory, removed by `removeTempDirs`: under the system's temp dir by default, so
 * a client run in it finds no git checkout around it; `base` = "target" puts it under
 * target/clients-tmp instead (Codex refuses to set up its helper links when CODEX_HOME lies
 * under a temporary directory).
 */
export function tempDir(prefix, base = "tmp") {
	const parent = base === "target" ? join(REPO_DIR, "target", "clients-tmp") : tmpdir();
	mkdirSync(parent, { recursive: true });
	const dir = mkdtempSync(join(parent, `pi-repl-clients-${prefix}-`));
	made.push(dir);
	return dir;
}

export function removeTempDirs() {
	for (const dir of made.splice(0)) rmSync(dir, { recursive: true, force: true });
}

/** A unique mark for one test's processes. */
export function newMark() {
	return randomUUID();
}

const CREDENTIAL = /(_API_KEY|_APIKEY|_TOKEN|_SECRET|_SECRET_KEY|_ACCESS_KEY|_PASSWORD|_CREDENTIALS|_AUTH)$/;
const PROVIDER = /^(ANTHROPIC_|CLAUDE|CODEX_|OPENAI_|PI_|OTEL_)/;

/** This process's environment without credentials, provider settings or pi-repl settings. */
export function baseEnv() {
	const env = {};
	for (const [key, value] of Object.entries(process.env)) {
		if (value === undefined || CREDENTIAL.test(key) || PROVIDER.test(key) || /PROXY$/i.test(key)) continue;
		env[key] = value;
	}
	return env;
}

/**
 * The environment pi-repl gets from a client's MCP config: its home, the test Python, the mark,
 * and a TMPDIR of its own (where it makes its runtime dir), so a test can see what it left there.
 */
export function replServerEnv(mark, replHome, replTmp) {
	return { PI_REPL_HOME: replHome, PI_REPL_PYTHON: testPython(), PI_REPL_AUTO_SETUP: "0", TMPDIR: replTmp, [MARK_VAR]: mark };
}

/** Pids of live (not zombie) processes carrying `mark` in their environment. */
export function markedProcesses(mark) {
	const needle = `${MARK_VAR}=${mark}`;
	const found = [];
	for (const entry of readdirSync("/proc")) {
		if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
		try {
			const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
			if (stat.slice(stat.lastIndexOf(")") + 2).startsWith("Z")) continue;
			if (readFileSync(`/proc/${entry}/environ`, "utf8").split("\0").includes(needle)) found.push(Number(entry));
		} catch {
			// exited while we looked
		}
	}
	return found;
}

/** Command line of a live process, for messages. */
export function commandLine(pid) {
	try {
		return readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").filter((a) => a !== "").join(" ");
	} catch {
		return "(gone)";
	}
}

/** Kills whatever a test left behind, so one failure does not leak into the next test. */
export function killMarked(mark) {
	for (const pid of markedProcesses(mark)) {
		try {
			process.kill(pid, "SIGKILL");
		} catch {
			// already gone
		}
	}
}

/**
 * Waits until no process carries `mark` and returns `[]`, or returns what is still alive after
 * `ms`. A kernel notices its server's death through a lifeline, so it may outlive the client
 * by a moment: this waits for the event (the last marked process gone), it does not time it.
 */
export async function processesLeft(mark, ms = 15_000) {
	const deadline = Date.now() + ms;
	for (;;) {
		const alive = markedProcesses(mark);
		if (alive.length === 0 || Date.now() > deadline) return alive.map((pid) => `${pid}: ${commandLine(pid)}`);
		await new Promise((r) => setTimeout(r, 50));
	}
}

/** Spawns a command, collects its output, and kills it after `timeoutMs`. */
export function spawnToExit(command, args, options, timeoutMs) {
	const started = Date.now();
	const child = spawn(command, args, { ...options, stdio: ["ignore", "pipe", "pipe"] });
	let stdout = "";
	let stderr = "";
	child.stdout.on("data", (chunk) => (stdout += chunk.toString("utf8")));
	child.stderr.on("data", (chunk) => (stderr += chunk.toString("utf8")));
	let timedOut = false;
	const timer = setTimeout(() => {
		timedOut = true;
		child.kill("SIGKILL");
	}, timeoutMs);
	return new Promise((resolve, reject) => {
		child.once("error", reject);
		child.once("close", (code, signal) => {
			clearTimeout(timer);
			resolve({ code, signal, timedOut, stdout, stderr, durationMs: Date.now() - started });
		});
	});
}

/** Every file under `dir`, as paths relative to it (directories themselves are not listed). */
export function filesUnder(dir) {
	const found = [];
	for (const entry of readdirSync(dir, { withFileTypes: true })) {
		const path = join(dir, entry.name);
		if (entry.isDirectory()) found.push(...filesUnder(path).map((p) => join(entry.name, p)));
		else found.push(entry.name);
	}
	return found;
}
