import { EventEmitter } from "node:events";
import { groupFailures, type FailureGroup } from "../provisioner/failures.js";
import type { BoardFeed } from "./live.js";
import { progress, type Progress } from "./progress.js";

// What the board's records add up to, for every open page at once: failures grouped by cause
// (provisioner/failures.ts) and progress (progress.ts). Recomputed from the feed's records at
// most once per `settleMs` after changes (a burst of 10,000 record changes costs one computation),
// and progress every `tickMs` regardless, since its clock moves. Emits `failures` and `progress`.

export class Insights extends EventEmitter {
  private failuresCache: FailureGroup[] = [];
  private progressCache: Progress | undefined;
  private timer: NodeJS.Timeout | undefined;
  private ticker: NodeJS.Timeout | undefined;
  private failuresKey = "";
  private readonly onChange = () => this.schedule();

  constructor(
    private readonly feed: BoardFeed,
    private readonly settleMs = 500,
    private readonly tickMs = 10_000,
  ) {
    super();
    this.setMaxListeners(0);
    feed.on("node", this.onChange);
    feed.on("remove", this.onChange);
    feed.on("snapshot", this.onChange);
    this.ticker = setInterval(() => this.emit("progress", this.progress(true)), tickMs);
    this.ticker.unref();
  }

  failures(): FailureGroup[] {
    if (this.timer) this.compute(); // a change is pending: answer with it
    return this.failuresCache;
  }

  progress(fresh = false): Progress {
    if (fresh || this.timer || !this.progressCache) this.progressCache = progress([...this.feed.allRecords()], Date.now());
    return this.progressCache;
  }

  private schedule(): void {
    if (this.timer) return;
    this.timer = setTimeout(() => {
      this.compute();
      this.emit("progress", this.progress(true));
    }, this.settleMs);
  }

  private compute(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    const groups = groupFailures(this.feed.allRecords());
    const key = JSON.stringify(groups);
    this.failuresCache = groups;
    if (key !== this.failuresKey) {
      this.failuresKey = key;
      this.emit("failures", groups);
    }
  }

  stop(): void {
    clearTimeout(this.timer);
    clearInterval(this.ticker);
    this.feed.off("node", this.onChange);
    this.feed.off("remove", this.onChange);
    this.feed.off("snapshot", this.onChange);
  }
}
