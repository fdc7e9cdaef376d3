// Running the real Claude Code (from npm) in print mode against pi-repl and the scripted model.
//
// Owns: one isolated run — its own HOME, CLAUDE_CONFIG_DIR, project dir, PI_REPL_HOME and an
// MCP config naming only pi-repl (`--strict-mcp-config`) — and what came out of it: exit status,
// what the scripted model received, Claude Code's debug log, and the processes left behind.
//
// Offline: the model API is the fake on 127.0.0.1 (ANTHROPIC_BASE_URL, a dummy key), and
// telemetry, error reporting, auto-update, non-essential traffic and the plugin marketplace
// auto-install are switched off. By default this version defers MCP tools behind its ToolSearch
// tool (the scripted model then loads `execute` with it first); `toolSearch: false` sets
// `ENABLE_TOOL_SEARCH=false`, which offers the tool directly and makes the first request wait for
// the server's `tools/list`.

import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { startFakeAnthropic } from "./fake-anthropic.mjs";
import { baseEnv, clientModules, filesUnder, killMarked, MARK_VAR, newMark, processesLeft, replBinary, replServerEnv, spawnToExit, tempDir } from "./env.mjs";

/** The name Claude Code gives pi-repl's tool when the server is called `pi-repl`. */
export const CLAUDE_TOOL = "mcp__pi-repl__execute";

/** The native Claude Code binary of this platform (what the npm package's postinstall links as `claude`). */
export function claudeBinary() {
	const modules = clientModules();
	const platform = `${process.platform}-${process.arch}`;
	const native = join(modules, "@anthropic-ai", `claude-code-${platform}`, process.platform === "win32" ? "claude.exe" : "claude");
	if (!existsSync(native)) throw new Error(`no Claude Code binary for ${platform} at ${native}`);
	return native;
}

/**
 * Runs `claude -p` once. `calls` are the scripted model's tool calls (helpers/script.mjs);
 * `toolSearch` keeps Claude Code's default of deferring MCP tools behind ToolSearch;
 * `serverArgs` go after `pi-repl mcp`; `toolTimeoutMs` sets Claude Code's MCP tool timeout
 * (`MCP_TOOL_TIMEOUT`, in ms; Claude Code ignores values under 1000).
 * `shared.project` and `shared.replHome` name a project dir and a PI_REPL_HOME that outlive the run
 * (a later run of the same durable session).
 * Resolves when Claude Code has exited and every process it started is gone (or `leftTimeoutMs`
 * passed: `left` then lists what is still alive, and the test's cleanup kills it).
 */
export async function runClaude({ calls, toolSearch = false, serverArgs = [], toolTimeoutMs, timeoutMs = 120_000, leftTimeoutMs = 15_000, shared = {} }) {
	const root = tempDir("claude");
	const dirs = {
		home: join(root, "home"),
		config: join(root, "config"),
		project: shared.project ?? join(root, "project"),
		replHome: shared.replHome ?? join(root, "repl-home"),
		replTmp: join(root, "repl-tmp"),
		tmp: join(root, "tmp"),
		runtime: join(root, "run"),
	};
	for (const dir of Object.values(dirs)) mkdirSync(dir, { recursive: true });
	const mark = newMark();
	const fake = await startFakeAnthropic({ tool: CLAUDE_TOOL, calls, finalText: "All cells ran." });
	try {
		const mcpConfig = join(root, "mcp.json");
		writeFileSync(
			mcpConfig,
			JSON.stringify({ mcpServers: { "pi-repl": { type: "stdio", command: replBinary(), args: ["mcp", ...serverArgs], env: replServerEnv(mark, dirs.replHome, dirs.replTmp) } } }),
		);
		const debugFile = join(root, "claude-debug.log");
		const env = {
			...baseEnv(),
			HOME: dirs.home,
			CLAUDE_CONFIG_DIR: dirs.config,
			// Its per-project temp files and its messaging socket, otherwise under /tmp.
			CLAUDE_CODE_TMPDIR: dirs.tmp,
			XDG_RUNTIME_DIR: dirs.runtime,
			ANTHROPIC_BASE_URL: fake.baseUrl,
			ANTHROPIC_API_KEY: "sk-ant-test-not-a-real-key",
			DISABLE_TELEMETRY: "1",
			DISABLE_ERROR_REPORTING: "1",
			DISABLE_AUTOUPDATER: "1",
			CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
			CLAUDE_CODE_DISABLE_OFFICIAL_MARKETPLACE_AUTOINSTALL: "1",
			...(toolSearch ? {} : { ENABLE_TOOL_SEARCH: "false" }),
			...(toolTimeoutMs === undefined ? {} : { MCP_TOOL_TIMEOUT: String(toolTimeoutMs) }),
			[MARK_VAR]: mark,
		};
		const args = [
			"-p",
			"Run the cells.",
			"--mcp-config",
			mcpConfig,
			"--strict-mcp-config",
			"--allowedTools",
			CLAUDE_TOOL,
			"--no-session-persistence",
			"--output-format",
			"json",
			"--debug-file",
			debugFile,
		];
		const run = await spawnToExit(claudeBinary(), args, { cwd: dirs.project, env }, timeoutMs);
		const left = await processesLeft(mark, leftTimeoutMs);
		killMarked(mark);
		return {
			...run,
			records: fake.records,
			toolSearches: fake.toolSearches,
			sideRequests: fake.sideRequests,
			unhandled: fake.unhandled,
			debugLog: existsSync(debugFile) ? readFileSync(debugFile, "utf8") : "",
			left,
			replTmpLeft: filesUnder(dirs.replTmp),
		};
	} finally {
		killMarked(mark);
		await fake.close();
	}
}
