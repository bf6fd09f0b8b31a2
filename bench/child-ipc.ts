// The IPC a bench child process speaks with its parent: {type: "ready", ...extra} once serving,
// {type: "cpu"} answered with its CPU time so far (ms), and `stop()` then exit on {type: "stop"}
// or when the parent goes away.
export function serveParent(stop: () => Promise<void>, ready: Record<string, unknown> = {}): void {
  const exit = async () => {
    await stop().catch(() => undefined);
    process.exit(0);
  };
  process.on("message", (m: { type?: string }) => {
    if (m?.type === "stop") void exit();
    if (m?.type === "cpu") {
      const u = process.cpuUsage();
      process.send?.({ type: "cpu", ms: (u.user + u.system) / 1000 });
    }
  });
  process.on("disconnect", () => void exit());
  process.send?.({ type: "ready", ...ready });
}
