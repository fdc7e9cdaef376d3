// Test environment: where the binary, the Python and the temp dirs are, and finding processes.
//
// Owns: resolving PI_REPL_BIN / PI_REPL_TEST_PYTHON (with local fallbacks), isolated temp homes,
// a base environment with no provider credentials, and finding every process a test started
// (each test marks its processes with a unique environment variable, inherited by pi, pi-repl
// and the kernel).

import { randomUUID } from "node:crypto";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** The package root (tests are compiled to build/tests/...). */
export const PACKAGE_DIR = resolve(fileURLToPath(import.meta.url), "../../../..");
/** The pi-repl checkout the package lives in. */
export const REPO_DIR = resolve(PACKAGE_DIR, "..");
/** pi from npm (a dev dependency). */
export const PI_BIN = join(PACKAGE_DIR, "node_modules", ".bin", "pi");
/** The scripted model (a pi extension), loaded from its TypeScript source by pi. */
export const SCRIPTED_PROVIDER = join(PACKAGE_DIR, "tests", "fixtures", "scripted-provider.ts");
/** The variable that marks a test's processes. */
export const MARK_VAR = "PI_REPL_E2E_MARK";

/** The pi-repl binary under test: PI_REPL_BIN, else the checkout's debug build. */
export function replBinary(): string {
	const path = process.env.PI_REPL_BIN || join(REPO_DIR, "target", "debug", "pi-repl");
	if (!existsSync(path)) throw new Error(`no pi-repl binary at ${path}: run \`cargo build\` or set PI_REPL_BIN`);
	return path;
}

/** The Python that runs kernels: PI_REPL_TEST_PYTHON (set by scripts/test), else the local venv. */
export function testPython(): string {
	const path = process.env.PI_REPL_TEST_PYTHON || "/tmp/pihome/venv/bin/python";
	if (!existsSync(path)) throw new Error(`no Python at ${path}: set PI_REPL_TEST_PYTHON to a venv with ipykernel`);
	return path;
}

const made: string[] = [];

/** A fresh temp directory, removed by `removeTempDirs`. */
export function tempDir(prefix: string): string {
	const dir = mkdtempSync(join(tmpdir(), `pi-repl-ext-${prefix}-`));
	made.push(dir);
	return dir;
}

export function removeTempDirs(): void {
	for (const dir of made.splice(0)) rmSync(dir, { recursive: true, force: true });
}

/** A unique mark for one test's processes. */
export function newMark(): string {
	return randomUUID();
}

const CREDENTIAL = /(_API_KEY|_APIKEY|_TOKEN|_SECRET|_SECRET_KEY|_ACCESS_KEY|_PASSWORD|_CREDENTIALS)$/;

/**
 * The environment for a pi-repl under test: no credentials, its own PI_REPL_HOME, the test
 * Python, no venv building, and the mark.
 */
export function replEnv(mark: string, replHome: string): Record<string, string> {
	const env: Record<string, string> = {};
	for (const [key, value] of Object.entries(process.env)) {
		if (value === undefined || CREDENTIAL.test(key) || key.startsWith("PI_")) continue;
		env[key] = value;
	}
	env.PI_REPL_HOME = replHome;
	env.PI_REPL_PYTHON = testPython();
	env.PI_REPL_AUTO_SETUP = "0";
	env[MARK_VAR] = mark;
	return env;
}

/** Pids of live processes carrying `mark` in their environment. */
export function markedProcesses(mark: string): number[] {
	const needle = `${MARK_VAR}=${mark}`;
	const found: number[] = [];
	for (const entry of readdirSync("/proc")) {
		if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
		try {
			const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
			if (stat.slice(stat.lastIndexOf(")") + 2).startsWith("Z")) continue; // a zombie is gone
			if (readFileSync(`/proc/${entry}/environ`, "utf8").split("\0").includes(needle)) found.push(Number(entry));
		} catch {
			// exited while we looked
		}
	}
	return found;
}

/** Command line of a live process. */
export function commandLine(pid: number): string[] {
	try {
		return readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").filter((a) => a !== "");
	} catch {
		return [];
	}
}

/** Kills whatever a test left behind (so one failure does not leak into the next test). */
export function killMarked(mark: string): void {
	for (const pid of markedProcesses(mark)) {
		try {
			process.kill(pid, "SIGKILL");
		} catch {
			// already gone
		}
	}
}
