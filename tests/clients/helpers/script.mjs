// What the scripted model calls next: the one rule both fake model APIs follow.
//
// A script is a list of tool inputs, one per call, in order. An entry may instead be a function
// of the tool results the model has read so far (oldest first, as the fake API normalised them:
// `{ content: [{ type: "text", text }, …] }`), for a model that reads something from a result,
// such as a cell number, and uses it in its next call; a function that returns `undefined` ends
// the calls there and the model answers with its closing text.

/** The model's next tool input after `results`, or `undefined` when its calls are done. */
export function nextCall(calls, results) {
	const next = calls[results.length];
	return typeof next === "function" ? next(results) : next;
}
