// Installing pi-repl the way a user without Rust does, from the artifacts `scripts/release` puts in
// dist/ (PI_REPL_DIST): the wheel with pip into a clean venv and with `uvx`, and the npm packages
// with npm and with `pi install`. Every install runs with a PATH that holds no cargo and no
// pi-repl build, then a real cell runs through the installed binary (a real ipykernel, real MCP,
// the real pi from npm with a scripted model on no network at all).
//
// Environment (set by scripts/test): PI_REPL_DIST (the artifacts), PI_REPL_TEST_PYTHON (the test
// venv: its base interpreter makes the clean venvs; pi's kernels run in it), PI_REPL_UV (uv from
// PyPI), PI_REPL_INSTALL_CACHE (uv's cache, kept between runs).

import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { homedir, tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { after, describe, it } from "node:test";
import { fileURLToPath } from "node:url";

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const DIST = resolve(required("PI_REPL_DIST"));
const TEST_PYTHON = required("PI_REPL_TEST_PYTHON");
const PI_BIN = join(REPO, "extension", "node_modules", ".bin", "pi");
const SCRIPTED_PROVIDER = join(REPO, "extension", "tests", "fixtures", "scripted-provider.ts");
/** The directories a user without Rust has on PATH: the system's, where node and npm live. */
const SYSTEM_PATH = [dirname(process.execPath), "/usr/local/bin", "/usr/bin", "/bin"].join(":");

function required(name) {
	const value = process.env[name];
	if (!value) throw new Error(`${name} is not set (scripts/test sets it)`);
	return value;
}

const temps = [];
function tempDir(prefix) {
	const dir = mkdtempSync(join(tmpdir(), `pi-repl-install-${prefix}-`));
	temps.push(dir);
	return dir;
}
after(() => {
	for (const dir of temps) rmSync(dir, { recursive: true, force: true });
});

function artifact(pattern) {
	const found = readdirSync(DIST).filter((name) => pattern.test(name));
	assert.equal(found.length, 1, `exactly one ${pattern} in ${DIST}: ${found}`);
	return join(DIST, found[0]);
}

/** Runs a command to completion; throws with its output if it fails. */
function run(command, args, options) {
	const result = spawnSync(command, args, { encoding: "utf8", timeout: 300_000, ...options });
	if (result.status !== 0) {
		throw new Error(`${command} ${args.join(" ")} exited ${result.status}\n${result.stdout}\n${result.stderr}`);
	}
	return result;
}

/**
 * A user's environment: a fresh HOME, no cargo and no pi-repl on PATH (unless `extra.PATH` adds
 * one), no PI_REPL_* or Rust variables. The machine's network settings stay (its CA bundle
 * variables, npm's user config), as they would for the user.
 */
function userEnv(home, extra = {}) {
	const inherited = Object.fromEntries(
		Object.entries(process.env).filter(([name]) => !/^(PI_|CARGO|RUSTUP|RUSTC|UV_|VIRTUAL_ENV|PYTHON)/.test(name)),
	);
	const npmrc = join(homedir(), ".npmrc");
	if (existsSync(npmrc)) inherited.NPM_CONFIG_USERCONFIG = npmrc;
	const env = {
		...inherited,
		HOME: home,
		PATH: SYSTEM_PATH,
		LANG: "C.UTF-8",
		PI_REPL_HOME: join(home, "pi-repl-home"),
		PI_REPL_AUTO_SETUP: "0",
		...extra,
	};
	for (const dir of env.PATH.split(":")) {
		for (const tool of ["cargo", "rustc"]) {
			assert.equal(spawnSync("test", ["-x", join(dir, tool)]).status, 1, `${tool} in ${dir}`);
		}
	}
	return env;
}

/**
 * Speaks MCP to `command` over stdio: initialize, tools/list, one `execute` call. Returns the
 * tool names and the call's text.
 */
function mcpSession(command, args, env) {
	const child = spawn(command, args, { env, stdio: ["pipe", "pipe", "pipe"] });
	let stderr = "";
	child.stderr.on("data", (chunk) => (stderr += chunk));
	const pending = new Map();
	let buffer = "";
	child.stdout.on("data", (chunk) => {
		buffer += chunk;
		let index;
		while ((index = buffer.indexOf("\n")) !== -1) {
			const line = buffer.slice(0, index);
			buffer = buffer.slice(index + 1);
			const message = JSON.parse(line);
			pending.get(message.id)?.(message);
		}
	});
	const exited = new Promise((resolveExit) => child.once("close", (code) => resolveExit(code)));
	let nextId = 1;
	const request = (method, params) =>
		new Promise((resolveReply, reject) => {
			const id = nextId++;
			pending.set(id, resolveReply);
			exited.then((code) => reject(new Error(`the server exited (${code}) before answering ${method}\n${stderr}`)));
			child.stdin.write(`${JSON.stringify({ jsonrpc: "2.0", id, method, params })}\n`);
		});
	return (async () => {
		const init = await request("initialize", {
			protocolVersion: "2025-06-18",
			capabilities: {},
			clientInfo: { name: "install-test", version: "1" },
		});
		assert.equal(init.result.serverInfo.name, "pi-repl", JSON.stringify(init));
		child.stdin.write(`${JSON.stringify({ jsonrpc: "2.0", method: "notifications/initialized" })}\n`);
		const list = await request("tools/list", {});
		const call = await request("tools/call", { name: "execute", arguments: { code: "print(6 * 7)" } });
		child.stdin.end();
		assert.equal(await exited, 0, stderr);
		return {
			tools: list.result.tools.map((tool) => tool.name),
			text: call.result.content.map((block) => block.text ?? "").join(""),
			isError: call.result.isError ?? false,
		};
	})();
}

describe("the PyPI wheel", () => {
	// This machine's wheel (a release also holds other architectures').
	const machine = { x64: "x86_64", arm64: "aarch64" }[process.arch] ?? process.arch;
	const wheel = artifact(new RegExp(`^pi_repl-.*_${machine}\\.whl$`));
	const basePython = run(TEST_PYTHON, ["-c", "import sys; print(sys._base_executable)"]).stdout.trim();

	it("installs with pip into a clean venv and runs a cell in that venv, with no setup step", async () => {
		const home = tempDir("pip");
		const venv = join(home, "venv");
		run(basePython, ["-m", "venv", venv]);
		const env = userEnv(home, { PATH: `${join(venv, "bin")}:${SYSTEM_PATH}` });
		run(join(venv, "bin", "python"), ["-m", "pip", "install", "--quiet", "--disable-pip-version-check", wheel], { env });
		// `pi-repl` is now on PATH (the venv's bin/), and nowhere else.
		const exec = run("pi-repl", ["exec", "1+1"], { env });
		assert.equal(exec.stdout, "2\n");
		const doctor = spawnSync("pi-repl", ["doctor"], { env, encoding: "utf8" });
		assert.match(doctor.stdout, new RegExp(`interpreter: the environment pi-repl is installed in \\(${venv}/bin/python\\)`), doctor.stdout);
		const session = await mcpSession("pi-repl", ["mcp"], env);
		assert.deepEqual(session.tools, ["execute"]);
		assert.equal(session.text.trim(), "42");
		assert.equal(session.isError, false);
	});

	it("runs as `uvx --from <wheel> pi-repl mcp` and answers tools/list and a call", async () => {
		const home = tempDir("uvx");
		const uv = required("PI_REPL_UV");
		const env = userEnv(home, {
			PATH: `${dirname(uv)}:${SYSTEM_PATH}`,
			UV_CACHE_DIR: required("PI_REPL_INSTALL_CACHE"),
			UV_TOOL_DIR: join(home, "uv-tools"),
			UV_PYTHON: basePython,
			UV_PYTHON_DOWNLOADS: "never",
			UV_NO_CONFIG: "1",
			// The machine's CA bundle (SSL_CERT_FILE), as pip and npm use it.
			UV_NATIVE_TLS: "1",
		});
		const session = await mcpSession("uvx", ["--from", wheel, "pi-repl", "mcp"], env);
		assert.deepEqual(session.tools, ["execute"]);
		assert.equal(session.text.trim(), "42");
	});
});

describe("the npm packages", () => {
	const extension = artifact(/^pi-repl-\d.*\.tgz$/);
	const platform = artifact(new RegExp(`^pi-repl-${process.platform}-${process.arch}-\\d.*\\.tgz$`));

	it("`pi install` of the extension finds the platform binary without PI_REPL_BIN and `pi --repl` runs a cell", () => {
		const root = tempDir("pi");
		const [home, agentDir, project] = ["home", "agent", "project"].map((name) => join(root, name));
		for (const dir of [home, agentDir, project]) mkdirSync(dir, { recursive: true });
		const env = userEnv(home, {
			PI_CODING_AGENT_DIR: agentDir,
			PI_OFFLINE: "1",
			PI_TELEMETRY: "0",
			PI_SKIP_VERSION_CHECK: "1",
			// The kernel's Python: the tests' venv (this test is about finding the binary).
			PI_REPL_PYTHON: TEST_PYTHON,
			PI_REPL_TEST_SCRIPT: join(root, "script.json"),
			PI_REPL_TEST_RECORD: join(root, "record.jsonl"),
		});
		// Stands in for the registry serving the platform package that pi-repl names as an
		// optional dependency: installed first into the project's pi package root, it satisfies
		// that dependency when pi installs pi-repl there.
		const npmRoot = join(project, ".pi", "npm");
		run("npm", ["install", "--prefix", npmRoot, "--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error", platform], { env, cwd: project });
		run(PI_BIN, ["install", "-l", `npm:pi-repl@file:${extension}`], { env, cwd: project });
		// pi (0.73) loads a pinned npm source only when the installed version equals the pin, which
		// a `file:` spec never does: name the package as `pi install -l npm:pi-repl` would have, so
		// pi loads the copy npm just installed (.pi/npm/node_modules/pi-repl).
		const settings = join(project, ".pi", "settings.json");
		assert.deepEqual(JSON.parse(readFileSync(settings, "utf8")).packages, [`npm:pi-repl@file:${extension}`]);
		writeFileSync(settings, JSON.stringify({ packages: ["npm:pi-repl"] }));
		writeFileSync(env.PI_REPL_TEST_SCRIPT, JSON.stringify({ steps: [{ call: { code: "print(6 * 7)" } }, { say: "done" }] }));
		const pi = spawnSync(
			PI_BIN,
			["-e", SCRIPTED_PROVIDER, "--provider", "scripted", "--model", "scripted-1", "--repl", "--no-session", "--mode", "json", "go"],
			{ env, cwd: project, encoding: "utf8", timeout: 120_000 },
		);
		assert.equal(pi.status, 0, pi.stderr);
		const ends = pi.stdout
			.split("\n")
			.filter((line) => line.startsWith("{"))
			.map((line) => JSON.parse(line))
			.filter((event) => event.type === "tool_execution_end");
		assert.equal(ends.length, 1, pi.stdout);
		assert.equal(ends[0].isError, false, JSON.stringify(ends[0]));
		assert.equal(ends[0].result.content.map((block) => block.text).join(""), "42");
	});
});
