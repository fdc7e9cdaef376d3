// The pi extension: `pi --repl` gives the model one tool, `execute`, served by `pi-repl mcp`.
//
// Owns: the wiring into pi — the `--repl` flag, registering `execute` with the metadata pi-repl
// lists, collapsing the active tools to it, the session lifecycle (start, fork, resume, shutdown),
// forwarding each call (streamed output, abort, images, errors), answering a cell's `llm_query`
// with pi's current model (sampling.ts) and showing those calls under the running call, running
// a cell's `tools.<name>(...)` with this session's tools (host-tools.ts; the definitions come from
// `pi-tools.ts`), giving pi-repl the command line of a sub-agent that is a pi process
// (pi-agents.ts), drawing sub-agents under their cell (agent-frames.ts), following pi's
// conversation tree (after `/tree`, rewinding the workspace to the state the new branch saw, and
// forking a `/fork` from the state its path saw: workspace-tree.ts), and telling the human when
// the workspace was rebuilt, rewound or pi-repl stopped. Every behaviour of the workspace itself
// is pi-repl's; this file spawns, forwards, answers and renders.
//
// Components: binary.ts (finding pi-repl), session-key.ts (which workspace), process.ts,
// transport.ts and line-framing.ts (the child, its pipes, its messages), client.ts (one MCP
// connection), workspace.ts (deaths and respawns), tool-meta.ts (tools/list → pi's tool),
// result.ts (MCP result → pi's result), sampling.ts (a cell's model calls, answered by pi's
// model), model-calls.ts (those in flight), workspace-tree.ts (which state a point of the
// conversation saw), render.ts and text-wrap.ts (the TUI view).
//
// Why the tool is registered at `session_start` and not in the factory: its description and
// guidelines come from pi-repl's `tools/list`, pi-repl is spawned per session (its key comes from
// the session file, known only then), the `--repl` flag's value is only known after the factory
// ran, and a stock session must spawn nothing. pi supports registering tools from `session_start`
// ("pi.registerTool() works both during extension load and after startup", extensions.md).

import { fileURLToPath } from "node:url";
import { completeSimple } from "@mariozechner/pi-ai";
import type { AgentToolUpdateCallback, ExtensionAPI, ExtensionContext } from "@mariozechner/pi-coding-agent";
import { keyHint } from "@mariozechner/pi-coding-agent";
import { type AgentFrame, AgentFrames, agentFrameLines, framesOf } from "./agent-frames.js";
import { resolveBinary } from "./binary.js";
import { type HostToolsAnswerer, type SamplingAnswerer, TOOL_NAME } from "./client.js";
import { callHostTool, describeHostTools, type HostToolInfo, type HostToolSource, listHostTools } from "./host-tools.js";
import { AGENT_WORKSPACE_VAR, childArgv, type PiAgentsAnswerer, watchParentHost } from "./pi-agents.js";
import { executorOf } from "./pi-tools.js";
import { ModelCalls } from "./model-calls.js";
import { bodyLines, type CallView, DrawnLines, headerLine } from "./render.js";
import { contentText, type ExecuteDetails, type MappedResult, mapOutcome, resetNotice } from "./result.js";
import { answerSampling, type PiModels, SamplingError } from "./sampling.js";
import { planSession } from "./session-key.js";
import { renderTerminal } from "./terminal-text.js";
import { metaFromTool, type ToolMeta, unavailableMeta } from "./tool-meta.js";
import { type StartResult, Workspace } from "./workspace.js";
import { decide, type HeldState, heldAfter, latestRecorded, REWIND_ENTRY, stateLeftBy, stateSeenBy, type WorkspaceState } from "./workspace-tree.js";

/** This package's root (src/..): a build of the pi-repl checkout above it is looked for (binary.ts). */
const PACKAGE_DIR = fileURLToPath(new URL("..", import.meta.url));
/** Streamed output is pushed to pi at most this often. */
const UPDATE_INTERVAL_MS = 100;
/** Characters of streamed output kept for the live view (the final result is pi-repl's, capped by it). */
const STREAM_KEEP_CHARS = 64 * 1024;

/** Row-local state shared by the call and result renderers. */
interface RenderState {
	details?: ExecuteDetails;
	output?: string;
	/** Stops repainting the row for its sub-agents (set while it watches them). */
	unwatchFrames?: () => void;
	/** What the row last drew of its sub-agents. */
	framesDrawn?: string;
}

export default function piRepl(pi: ExtensionAPI): void {
	pi.registerFlag("repl", {
		type: "boolean",
		default: false,
		description: "One tool, execute: Python in a persistent pi-repl workspace (replaces the other tools)",
	});

	const enabled = () => pi.getFlag("repl") === true || process.env.PI_REPL_FORCE === "1";
	let workspace: Workspace | undefined;
	/** The pi-repl session the workspace serves (`--session`); `undefined`: ephemeral. */
	let workspaceName: string | undefined;
	/** The state the workspace holds, for following pi's conversation tree (workspace-tree.ts). */
	let held: HeldState;
	/** The session the workspace serves, and its start (shared by repeated `session_start`s). */
	let serving: { identity: string; started: Promise<StartResult> } | undefined;
	/** Results of failed calls: pi rebuilds a thrown error as bare text; `tool_result` restores them. */
	const failed = new Map<string, MappedResult>();
	/** A cell's model calls in flight, shown under the running call (or in the footer without one). */
	const modelCalls = new ModelCalls();
	/** How many execute calls are running (they show the model calls themselves). */
	let runningCalls = 0;
	/** The session whose footer shows model calls of a cell no call is waiting for. */
	let footer: ExtensionContext | undefined;
	/** What the footer shows now (set again only when it changes). */
	let footerLine: string | undefined;
	const updateFooter = () => {
		const calls = modelCalls.list();
		const s = calls.length === 1 ? "" : "s";
		const line = runningCalls === 0 && calls.length > 0 ? `↳ llm_query: ${calls.length} model call${s} for a cell in the background (${calls[0]?.model})` : undefined;
		if (line === footerLine) return;
		footerLine = line;
		try {
			footer?.ui.setStatus("pi-repl-llm", line);
		} catch {
			// The session ended: there is no footer to update.
		}
	};
	modelCalls.subscribe(updateFooter);
	/** The sub-agents pi-repl streams, drawn under the call whose cell spawned them. */
	const agentFrames = new AgentFrames();
	/** pi's tool call id → the MCP request id of its `tools/call` (agent frames name the latter). */
	const requestIds = new Map<string, string | number>();
	/** Stops watching the parent host (a sub-agent pi only). */
	let stopParentWatch: (() => void) | undefined;
	/** The tools that were active when the session started, before they were collapsed to execute. */
	let activeAtStart: string[] = [];
	/** The context a cell's host tools run with: the running call's, else the session's. */
	let toolContext: ExtensionContext | undefined;
	const hostToolInfos = (): HostToolInfo[] => {
		const active = new Set([...activeAtStart, ...pi.getActiveTools()]);
		return pi.getAllTools().filter((tool) => tool.name !== TOOL_NAME && active.has(tool.name));
	};
	const hostToolSource: HostToolSource = {
		tools: hostToolInfos,
		executor: (name) => (toolContext ? executorOf(name, toolContext) : undefined),
	};
	const hostTools: HostToolsAnswerer = {
		call: (params, signal) => callHostTool(params, hostToolSource, signal),
		list: async () => ({ tools: listHostTools(hostToolInfos()) }),
	};

	pi.on("session_start", async (event, ctx) => {
		if (!enabled()) {
			// A stock session stays stock: no execute, nothing spawned.
			pi.setActiveTools(pi.getActiveTools().filter((name) => name !== TOOL_NAME));
			return;
		}
		const plan = planSession({
			reason: event.reason,
			sessionFile: ctx.sessionManager.getSessionFile(),
			previousSessionFile: event.previousSessionFile,
			headerParentSession: ctx.sessionManager.getHeader()?.parentSession,
			// A fork starts from the state its path saw (`/fork` to an earlier message).
			forkPoint: stateSeenBy(ctx.sessionManager.getBranch()),
		});
		// pi 0.73.1's RPC mode emits session_start twice after /fork, /clone and a session switch:
		// the same session must not get a second server (it would find the first one's lock).
		const identity = JSON.stringify([ctx.cwd, plan.session ?? null]);
		const repeated = serving?.identity === identity;
		toolContext = ctx;
		// A sub-agent pi ends with the pi-repl host that started it.
		// (SIGTERM: pi's own way out in every mode, which ends this session and its pi-repl first.)
		stopParentWatch ??= watchParentHost(process.env, () => process.ppid, () => process.kill(process.pid, "SIGTERM"));
		const active = pi.getActiveTools();
		if (!(active.length === 1 && active[0] === TOOL_NAME)) activeAtStart = active.filter((name) => name !== TOOL_NAME);
		if (!repeated) {
			await workspace?.stop();
			footer = ctx;
			const ws = new Workspace({
				resolveBinary: () => resolveBinary({ env: process.env, packageDir: PACKAGE_DIR }),
				plan,
				cwd: ctx.cwd,
				env: process.env,
				sampling: samplingFor(ctx, modelCalls),
				hostTools,
				onAgentFrames: (params) => agentFrames.update(framesOf(params)),
				piAgents: piAgentsFor(ctx),
			});
			workspace = ws;
			workspaceName = process.env[AGENT_WORKSPACE_VAR] ? undefined : plan.session;
			serving = { identity, started: ws.start() };
			// What the workspace will hold: the fork point, or the latest state the record names.
			held = workspaceName ? latestRecorded(ctx.sessionManager.getEntries(), workspaceName) : undefined;
			if (plan.forkFrom && plan.forkAt !== undefined) held = { workspace: plan.forkFrom, cell: plan.forkAt };
		}
		// The first start may build pi-repl's Python environment: say why pi is waiting.
		ctx.ui.setStatus("pi-repl", "pi-repl: starting the Python workspace…");
		const current = serving as { started: Promise<StartResult> };
		const started = await current.started;
		ctx.ui.setStatus("pi-repl", undefined);
		// The session ended (or another began) while pi-repl started: that start was ended, not failed.
		if (serving !== current) return;
		registerExecute(started.ok ? metaFromTool(started.tool) : unavailableMeta(started.message));
		pi.setActiveTools([TOOL_NAME]);
		if (repeated) return;
		// A fork that could not inherit its parent's workspace starts empty (workspace.ts).
		if (!started.ok || started.notes.length > 0) held = undefined;
		if (!started.ok) ctx.ui.notify(`pi-repl: ${firstLine(started.message)}`, "error");
		else for (const note of started.notes) ctx.ui.notify(`pi-repl: ${note}`, "warning");
	});

	/** The navigation being followed: a quick second `/tree` waits for the first one's rewind. */
	let following: Promise<void> = Promise.resolve();
	pi.on("session_tree", async (_event, ctx) => {
		if (!enabled() || !serving) return;
		following = following
			.then(() => followTree(ctx))
			.catch((error: unknown) => {
				try {
					ctx.ui.notify(`pi-repl: the workspace could not follow the conversation tree: ${error instanceof Error ? error.message : String(error)}`, "error");
				} catch {
					// The session ended: there is no one left to tell.
				}
			});
		await following;
	});

	/**
	 * After a navigation in pi's conversation tree (`/tree`): brings the workspace to the state
	 * the new leaf's path saw, with `execute {"rewind": N}` through the session's own server, and
	 * tells the human what happened (pi-repl's own text) or why the workspace keeps its state.
	 */
	async function followTree(ctx: ExtensionContext): Promise<void> {
		const action = decide(stateSeenBy(ctx.sessionManager.getBranch()), held, workspaceName);
		if (action.kind === "nothing") return;
		if (action.kind === "tell") {
			ctx.ui.notify(`pi-repl: ${action.message}`, "warning");
			return;
		}
		const ws = workspace;
		const name = workspaceName;
		if (!ws || !name || !serving) return;
		await serving.started;
		const target = action.to;
		ctx.ui.setStatus("pi-repl", `pi-repl: rewinding the workspace to its state after cell ${target.cell}…`);
		let mapped: MappedResult;
		try {
			mapped = mapOutcome(await ws.execute({ rewind: target.cell }));
		} finally {
			ctx.ui.setStatus("pi-repl", undefined);
		}
		if (workspace !== ws) return; // the session ended meanwhile
		tellHuman(ctx, mapped);
		const text = contentText(mapped.content);
		const cell = mapped.details.cell;
		if (!mapped.isError && cell !== undefined) {
			// Recorded on the new branch: the rewind is this branch's latest state from now on,
			// also for the next navigation and after a restart (latestRecorded).
			const rewound: WorkspaceState = { workspace: name, cell, same: target.cell };
			held = rewound;
			pi.appendEntry(REWIND_ENTRY, rewound);
			ctx.ui.notify(`pi-repl: ${text}`, "info");
			return;
		}
		// A refused rewind changes nothing (docs/rewind.md); any other failure leaves it unknown.
		if (mapped.details.status !== "error") held = heldAfter(held, undefined, {}, mapped.details);
		ctx.ui.notify(`pi-repl: the workspace was not rewound to the state the chosen message saw (after cell ${target.cell}):\n${text}`, "warning");
	}

	pi.on("session_shutdown", async () => {
		// pi's print mode exits only once no child is left: stop pi-repl and wait for it. A start
		// still in flight is ended, not waited for (a first start can take minutes).
		const ws = workspace;
		workspace = undefined;
		serving = undefined;
		footer = undefined;
		footerLine = undefined;
		agentFrames.close();
		stopParentWatch?.();
		stopParentWatch = undefined;
		await ws?.stop();
	});

	pi.on("tool_result", async (event) => {
		if (event.toolName !== TOOL_NAME) return undefined;
		const stashed = failed.get(event.toolCallId);
		failed.delete(event.toolCallId);
		if (!stashed || !event.isError) return undefined;
		// Put back what the throw lost: the images and the details the renderer needs.
		return { content: stashed.content, details: stashed.details, isError: true };
	});

	/** The sub-agents of a row's cell. */
	function framesOfRow(toolCallId: string, state: RenderState): AgentFrame[] {
		return agentFrames.forCall({ requestId: requestIds.get(toolCallId), cell: state.details?.cell });
	}

	/**
	 * Repaints a row while its cell's sub-agents change or run (their elapsed time), and stops once
	 * they have all settled and the cell is over.
	 */
	function watchFrames(context: { toolCallId: string; invalidate: () => void }, state: RenderState): void {
		if (state.unwatchFrames) return;
		state.unwatchFrames = agentFrames.subscribe(() => {
			const frames = framesOfRow(context.toolCallId, state);
			if (frames.length === 0) return;
			const running = frames.some((frame) => frame.status === "running");
			if (running || frameSignature(frames) !== state.framesDrawn) context.invalidate();
			const cellOver = state.details !== undefined && !["running", "background", "queued"].includes(state.details.status);
			if (!running && cellOver) {
				state.unwatchFrames?.();
				state.unwatchFrames = () => undefined;
			}
		});
	}

	function registerExecute(meta: ToolMeta): void {
		pi.registerTool<never, ExecuteDetails, RenderState>({
			name: TOOL_NAME,
			label: TOOL_NAME,
			description: withHostTools(meta.description, hostToolInfos()),
			promptSnippet: meta.promptSnippet,
			promptGuidelines: meta.promptGuidelines,
			parameters: meta.parameters as never,
			executionMode: "sequential",
			async execute(toolCallId, params, signal, onUpdate, ctx) {
				const ws = workspace;
				if (!ws) throw new Error("pi-repl is not running: this pi session has ended.");
				// The model's arguments go to pi-repl as given: its input schema (registered above) is the
				// contract, and pi-repl answers arguments it does not take with a clear error.
				const args = (typeof params === "object" && params !== null ? params : {}) as Record<string, unknown>;
				toolContext = ctx;
				const stream = new LiveOutput(onUpdate, modelCalls);
				runningCalls++;
				updateFooter();
				let outcome: Awaited<ReturnType<Workspace["execute"]>>;
				try {
					outcome = await ws.execute(args, {
						signal,
						onOutput: (text) => stream.push(text),
						onRequestId: (id) => requestIds.set(toolCallId, id),
					});
				} finally {
					runningCalls--;
					stream.close();
					// A cell that goes on in the background may still be asking: the footer shows it.
					updateFooter();
				}
				const mapped = mapOutcome(outcome);
				if (ws === workspace) {
					const left = stateLeftBy(workspaceName, args, mapped.details);
					if (left) mapped.details.workspaceState = left;
					held = heldAfter(held, left, args, mapped.details);
				}
				tellHuman(ctx, mapped);
				if (mapped.isError) {
					failed.set(toolCallId, mapped);
					throw new Error(contentText(mapped.content));
				}
				return { content: mapped.content, details: mapped.details };
			},
			renderCall(args, theme, context) {
				const state = context.state;
				const frames = framesOfRow(context.toolCallId, state);
				watchFrames(context, state);
				state.framesDrawn = frameSignature(frames);
				return new DrawnLines((width) => [headerLine(viewOf(args, state, context), width, theme), ...agentFrameLines(frames, width, theme, Date.now())]);
			},
			renderResult(result, options, theme, context) {
				const state = context.state;
				state.details = result.details ?? state.details;
				state.output = contentText(result.content);
				const view = { ...viewOf(context.args, state, context), expanded: options.expanded };
				const hint = keyHint("app.tools.expand", "to expand");
				return new DrawnLines((width) => bodyLines(view, width, theme, hint));
			},
		});
	}
}

/** pi-repl's description, followed by the host tools a cell can call (none: unchanged). */
function withHostTools(description: string, tools: HostToolInfo[]): string {
	const listing = describeHostTools(tools);
	return listing === "" ? description : `${description}\n\n${listing}`;
}

function viewOf(
	args: unknown,
	state: RenderState,
	context: { isPartial: boolean; isError: boolean; expanded: boolean },
): CallView {
	const code = codeOf(args);
	const details = state.details;
	let status = details?.status ?? "running";
	if (!details && context.isError) status = "error";
	let durationMs = details?.durationMs;
	if (status === "running" && details?.startedAt !== undefined) durationMs = Date.now() - details.startedAt;
	return {
		code,
		status,
		durationMs,
		output: state.output ?? "",
		reset: details?.reset,
		expanded: context.expanded,
		modelCalls: details?.modelCalls,
	};
}

/** The code a call sent, or for a look at an earlier cell (`{"cell": N}`) a line saying so. */
export function codeOf(args: unknown): string {
	const given = args as { code?: unknown; cell?: unknown; interrupt?: unknown } | undefined;
	if (typeof given?.code === "string") return given.code;
	if (typeof given?.cell === "number") return `# ${given.interrupt === true ? "interrupt" : "look at"} cell ${given.cell}`;
	return "";
}

/** One line for the human when the workspace was rebuilt or pi-repl stopped (no-op without a UI). */
function tellHuman(ctx: ExtensionContext, mapped: MappedResult): void {
	if (mapped.details.reset) ctx.ui.notify(resetNotice(mapped.details.reset), "warning");
	if (mapped.details.status === "stopped") {
		ctx.ui.notify(`pi-repl: ${firstLine(contentText(mapped.content))} The next call starts it again.`, "warning");
	}
}

/** What of a row's sub-agents is drawn, to tell a change from a tick. */
function frameSignature(frames: AgentFrame[]): string {
	return frames.map((f) => `${f.id}:${f.status}:${f.last_line ?? ""}`).join("|");
}

function firstLine(text: string): string {
	return text.split("\n").find((line) => line.trim() !== "") ?? text;
}

/**
 * Command lines of sub-agents as pi processes: this pi on the task, with the model the cell
 * prefers when pi can use it (`provider/id` or `id`), else pi's current model.
 */
function piAgentsFor(ctx: ExtensionContext): PiAgentsAnswerer {
	return {
		async command(params) {
			const given = (params ?? {}) as { task?: unknown; model?: unknown };
			if (typeof given.task !== "string") throw new Error("no task");
			const wanted = typeof given.model === "string" ? given.model : undefined;
			const preferred = wanted
				? ctx.modelRegistry.getAvailable().find((m) => `${m.provider}/${m.id}` === wanted || m.id === wanted)
				: undefined;
			const model = preferred ?? ctx.model;
			if (!model) throw new Error("pi has no model selected");
			return { argv: childArgv(given.task, { provider: model.provider, id: model.id }, process) };
		},
	};
}

/**
 * pi's model and credentials for a session's sampling requests. The context's getters read pi's
 * state at each request (the model the human selected last); after the session ended they throw.
 */
function samplingFor(ctx: ExtensionContext, calls: ModelCalls): SamplingAnswerer {
	const models: PiModels = {
		current: () => ctx.model,
		available: () => ctx.modelRegistry.getAvailable(),
		auth: (model) => ctx.modelRegistry.getApiKeyAndHeaders(model),
		complete: (model, context, options) => completeSimple(model, context, options),
	};
	return async (params, signal) => {
		try {
			return await answerSampling(params, models, signal, calls.watch);
		} catch (error) {
			if (error instanceof SamplingError) throw error;
			throw new SamplingError(`pi could not answer: ${error instanceof Error ? error.message : String(error)}`);
		}
	};
}

/**
 * Streams a running cell's output to pi, throttled, as one growing text, with the model calls in
 * flight. A change after a quiet spell is shown at once (a model call may be over before the next
 * tick); changes within `UPDATE_INTERVAL_MS` of the last update are shown together after it.
 */
class LiveOutput {
	private text = "";
	private timer: NodeJS.Timeout | undefined;
	private lastFlush = 0;
	private readonly startedAt = Date.now();
	private readonly unsubscribe: () => void;

	constructor(
		private readonly onUpdate: AgentToolUpdateCallback<ExecuteDetails> | undefined,
		private readonly calls: ModelCalls,
	) {
		this.unsubscribe = calls.subscribe(() => this.schedule());
		if (calls.list().length > 0) this.schedule();
	}

	push(chunk: string): void {
		// Rendered as it comes: a progress bar redrawn in place stays one line (issue 29).
		this.text = renderTerminal(this.text + chunk);
		if (this.text.length > STREAM_KEEP_CHARS) this.text = this.text.slice(this.text.length - STREAM_KEEP_CHARS);
		if (!this.timer) this.timer = setTimeout(() => this.flush(), UPDATE_INTERVAL_MS);
	}

	close(): void {
		this.unsubscribe();
		if (this.timer) clearTimeout(this.timer);
		this.timer = undefined;
	}

	private schedule(): void {
		if (this.timer) return;
		const wait = this.lastFlush + UPDATE_INTERVAL_MS - Date.now();
		if (wait <= 0) this.flush();
		else this.timer = setTimeout(() => this.flush(), wait);
	}

	private flush(): void {
		this.timer = undefined;
		this.lastFlush = Date.now();
		const details: ExecuteDetails = { status: "running", startedAt: this.startedAt };
		const calls = this.calls.list();
		if (calls.length > 0) details.modelCalls = calls;
		this.onUpdate?.({ content: [{ type: "text", text: this.text }], details });
	}
}
