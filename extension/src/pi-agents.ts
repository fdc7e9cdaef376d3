// Sub-agents as pi processes: when a cell spawns a child, pi-repl asks this extension how to
// start it (`pi-repl/agents/command`, `{task, model}` → `{argv}`; pi-repl's `agents/pi_child.rs`).
// The answer is this very pi — the same Node, its flags, the same CLI and the same `-e`
// extensions — in JSON mode with `--repl`, no session file, and pi's current model (a
// `model=` preference of the cell is used when pi has credentials for it). The child's own
// extension then serves the workspace the parent prepared: pi-repl sets `PI_REPL_AGENT_WORKSPACE`
// in the child's environment, and workspace.ts starts `pi-repl mcp --agent-workspace <dir>`.
//
// Owns: the command line. Does not own: the child's record, limits or reading its events
// (pi-repl's).

export const PI_AGENTS_CAPABILITY = "pi-repl/pi-agents";
export const PI_AGENTS_COMMAND = "pi-repl/agents/command";
export const AGENT_WORKSPACE_VAR = "PI_REPL_AGENT_WORKSPACE";
/** The pid of the pi-repl host that started this pi as a sub-agent. */
export const AGENT_PARENT_VAR = "PI_REPL_AGENT_PARENT_PID";
/** How often a sub-agent pi checks that its parent host lives. */
export const PARENT_CHECK_MS = 1_000;

/**
 * In a sub-agent pi: calls `end` once this process's parent is no longer the host that started
 * it (the host died, and this pi was re-parented), like a kernel's lifeline. Returns the stop, or
 * undefined when this pi is not a sub-agent.
 */
export function watchParentHost(env: Record<string, string | undefined>, ppid: () => number, end: () => void): (() => void) | undefined {
	const host = Number(env[AGENT_PARENT_VAR]);
	if (!env[AGENT_WORKSPACE_VAR] || !Number.isInteger(host) || host <= 0) return undefined;
	const check = () => {
		if (ppid() === host) return;
		clearInterval(timer);
		end();
	};
	const timer = setInterval(check, PARENT_CHECK_MS);
	timer.unref();
	check();
	return () => clearInterval(timer);
}

/** Answers pi-repl's command requests. A throw makes pi-repl use its own loop for the child. */
export interface PiAgentsAnswerer {
	command(params: unknown): Promise<{ argv: string[] }>;
}

/** The model a child runs with. */
export interface ChildModel {
	provider: string;
	id: string;
}

/** What the child is told besides its task. */
export const CHILD_INSTRUCTIONS =
	"You are a sub-agent started from a cell of another agent's Python workspace; your workspace is a copy of it when forked. Work on the task below with execute, and end with your final answer as plain text: that text is what the parent receives.";

/** The `-e`/`--extension` flags of pi's own command line, in order. */
export function extensionFlags(argv: readonly string[]): string[] {
	const flags: string[] = [];
	for (let i = 0; i < argv.length; i++) {
		const arg = argv[i] ?? "";
		if ((arg === "-e" || arg === "--extension") && i + 1 < argv.length) {
			flags.push(arg, argv[i + 1] ?? "");
			i++;
		} else if (arg.startsWith("--extension=")) flags.push(arg);
	}
	return flags;
}

/** The child's command line: this pi (`node`, its flags, the CLI, the extensions) on `task`. */
export function childArgv(task: string, model: ChildModel, proc: { execPath: string; execArgv: readonly string[]; argv: readonly string[] }): string[] {
	const cli = proc.argv[1];
	if (!cli) throw new Error("pi's command line is unknown");
	const prompt = `${CHILD_INSTRUCTIONS}\n\n# Task\n${task}`;
	return [
		proc.execPath,
		...proc.execArgv,
		cli,
		...extensionFlags(proc.argv.slice(2)),
		"--repl",
		"--mode",
		"json",
		"--no-session",
		"--provider",
		model.provider,
		"--model",
		model.id,
		prompt,
	];
}
