// Running the real Codex CLI (from npm) with `codex exec` against pi-repl and the scripted model.
//
// Owns: one isolated run — its own HOME, CODEX_HOME with a config.toml naming only the fake
// provider and pi-repl, project dir and PI_REPL_HOME — and what came out of it: exit status, the
// JSONL events, what the scripted model received, and the processes left behind.
//
// Offline: the provider is the fake Responses API on 127.0.0.1 (`wire_api = "responses"`);
// update checks and analytics are off, and the `plugins`, `remote_plugin` and `apps` features
// are off (with them on, this version clones its plugin marketplace from a code host and looks up
// two more hosts at start). `approval_policy = "never"` with the server's
// `default_tools_approval_mode = "approve"`: without the latter Codex refuses every MCP call
// ("MCP tool call requires approval, but approval policy is never"). `required = true`: otherwise
// Codex waits only about a second for an MCP server's tools before the first model request, and
// pi-repl lists its tools once the kernel is up (on a busy machine, or under strace, the first
// request then went out without the tool in 3 of 8 runs).

import { mkdirSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { startFakeOpenAI } from "./fake-openai.mjs";
import { baseEnv, clientModules, filesUnder, killMarked, MARK_VAR, newMark, processesLeft, replBinary, replServerEnv, spawnToExit, tempDir } from "./env.mjs";

/**
 * How Codex offers pi-repl's tool to the model: a namespace tool `mcp__pi_repl` (the server name
 * with `-` made `_`) holding a function `execute`; the model calls it with
 * `{ namespace: "mcp__pi_repl", name: "execute" }`.
 */
export const CODEX_TOOL = "mcp__pi_repl.execute";

/** Codex's npm launcher (it starts the native binary of this platform and forwards signals). */
export function codexLauncher() {
	return join(clientModules(), "@openai", "codex", "bin", "codex.js");
}

/** A TOML string (JSON's escapes are valid TOML basic-string escapes). */
const toml = (value) => JSON.stringify(value);

/**
 * Runs `codex exec` once. `calls` are the scripted model's tool calls (helpers/script.mjs);
 * `serverArgs` go after `pi-repl mcp`; `toolTimeoutSec` sets the server's `tool_timeout_sec`.
 * `shared.project` and `shared.replHome` name a project dir and a PI_REPL_HOME that outlive the run
 * (a later run of the same durable session).
 * Resolves when Codex has exited and every process it started is gone (or `leftTimeoutMs`
 * passed: `left` then lists what is still alive).
 */
export async function runCodex({ calls, serverArgs = [], toolTimeoutSec, timeoutMs = 120_000, leftTimeoutMs = 15_000, shared = {} }) {
	const root = tempDir("codex");
	const dirs = { home: join(root, "home"), codexHome: tempDir("codex-home", "target"), project: shared.project ?? join(root, "project"), replHome: shared.replHome ?? join(root, "repl-home"), replTmp: join(root, "repl-tmp") };
	for (const dir of Object.values(dirs)) mkdirSync(dir, { recursive: true });
	const mark = newMark();
	const fake = await startFakeOpenAI({ tool: CODEX_TOOL, calls, finalText: "All cells ran." });
	try {
		const serverEnv = Object.entries(replServerEnv(mark, dirs.replHome, dirs.replTmp))
			.map(([key, value]) => `${key} = ${toml(value)}`)
			.join(", ");
		writeFileSync(
			join(dirs.codexHome, "config.toml"),
			[
				`model = "scripted-1"`,
				`model_provider = "scripted"`,
				`approval_policy = "never"`,
				`sandbox_mode = "read-only"`,
				`check_for_update_on_startup = false`,
				``,
				`[analytics]`,
				`enabled = false`,
				``,
				`[features]`,
				`plugins = false`,
				`remote_plugin = false`,
				`apps = false`,
				``,
				`[model_providers.scripted]`,
				`name = "scripted model on loopback"`,
				`base_url = ${toml(fake.baseUrl)}`,
				`wire_api = "responses"`,
				`env_key = "SCRIPTED_MODEL_KEY"`,
				``,
				`[mcp_servers.pi-repl]`,
				`command = ${toml(replBinary())}`,
				`args = ${toml(["mcp", ...serverArgs])}`,
				`env = { ${serverEnv} }`,
				`default_tools_approval_mode = "approve"`,
				`required = true`,
				...(toolTimeoutSec === undefined ? [] : [`tool_timeout_sec = ${toolTimeoutSec}`]),
				``,
			].join("\n"),
		);
		const env = { ...baseEnv(), HOME: dirs.home, CODEX_HOME: dirs.codexHome, SCRIPTED_MODEL_KEY: "not-a-real-key", [MARK_VAR]: mark };
		const args = [codexLauncher(), "exec", "--skip-git-repo-check", "--json", "Run the cells."];
		const run = await spawnToExit(process.execPath, args, { cwd: dirs.project, env }, timeoutMs);
		const left = await processesLeft(mark, leftTimeoutMs);
		killMarked(mark);
		return {
			...run,
			events: jsonLines(run.stdout),
			records: fake.records,
			sideRequests: fake.sideRequests,
			unhandled: fake.unhandled,
			left,
			replTmpLeft: filesUnder(dirs.replTmp),
		};
	} finally {
		killMarked(mark);
		await fake.close();
	}
}

function jsonLines(text) {
	const events = [];
	for (const line of text.split("\n")) {
		if (!line.startsWith("{")) continue;
		try {
			events.push(JSON.parse(line));
		} catch {
			// not an event
		}
	}
	return events;
}
