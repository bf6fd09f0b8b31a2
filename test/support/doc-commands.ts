// Pure reading of the commands the docs show (test/docs/commands.test.ts runs them). No I/O here:
// the caller hands in each file's text. The conventions are those of docs/README.md:
//
// - Commands live in fenced blocks tagged `sh`, `bash`, `shell` or `console`. Every other line of a
//   `sh` block is a command (comment-only lines excepted); in a `console` block a command starts
//   with `$ `, and the lines after it, up to the next `$ ` line, are its shown output.
// - A trailing `# ...` is description, except that a description starting `exit N` (or
//   `exit code N`) states the command's exit code; without one the command must exit 0.
// - An untagged block may not contain a line starting with `muster ` or `$ `: tag it `sh`/`console`
//   (run) or `text` (a synopsis or other text that is not run).
// - Shown output is compared line by line (trailing blanks ignored) with stdout then stderr: `...`
//   inside a line matches any text within that line, a line that is only `...` matches any number
//   of lines. `<!-- illustrative -->` on its own line just before the block (blank lines allowed)
//   makes the shown output illustrative: not compared (the exit code still is).

export interface DocCommand {
  /** Repository-relative file. */
  file: string;
  /** 1-based line of the command in the file. */
  line: number;
  /** The command as run: prompt and trailing description removed; continuation lines joined. */
  text: string;
  /** The trailing description, without `#`. */
  comment: string | undefined;
  /** Exit code the doc states (`# exit N`); undefined means 0. */
  exit: number | undefined;
  /** Output the doc shows (console blocks); undefined when none is shown. */
  output: string[] | undefined;
  illustrative: boolean;
  lang: string;
}

export interface Extracted {
  commands: DocCommand[];
  /** Violations of the conventions, as `file:line: why`. */
  problems: string[];
}

const RUN_LANGS = new Set(["sh", "bash", "shell", "console"]);
const ILLUSTRATIVE = /^\s*<!--\s*illustrative\s*-->\s*$/;
const EXIT = /^exit(?: code)? (\d+)\b/;

/** Splits `cmd  # description` at the first `#` that starts a word outside quotes. */
export function splitComment(line: string): { text: string; comment: string | undefined } {
  let quote: string | undefined;
  for (let i = 0; i < line.length; i++) {
    const c = line[i]!;
    if (quote) {
      if (c === quote) quote = undefined;
      else if (c === "\\" && quote === '"') i++;
    } else if (c === "'" || c === '"') quote = c;
    else if (c === "\\") i++;
    else if (c === "#" && (i === 0 || /\s/.test(line[i - 1]!))) return { text: line.slice(0, i).trimEnd(), comment: line.slice(i + 1).trim() };
  }
  return { text: line.trimEnd(), comment: undefined };
}

interface Block {
  lang: string;
  /** 1-based line of the first content line. */
  start: number;
  lines: string[];
  illustrative: boolean;
}

function blocks(text: string): Block[] {
  const lines = text.split("\n");
  const out: Block[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^(\s*)```(\S*)\s*$/.exec(lines[i]!);
    if (!open) continue;
    let j = i - 1;
    while (j >= 0 && lines[j]!.trim() === "") j--;
    const illustrative = j >= 0 && ILLUSTRATIVE.test(lines[j]!);
    const body: string[] = [];
    let k = i + 1;
    // A block indented under a list item: its lines lose the fence's indentation.
    const indent = open[1]!.length;
    for (; k < lines.length && !/^\s*```\s*$/.test(lines[k]!); k++) body.push(lines[k]!.replace(new RegExp(`^ {0,${indent}}`), ""));
    out.push({ lang: open[2]!.toLowerCase(), start: i + 2, lines: body, illustrative });
    i = k;
  }
  return out;
}

function command(file: string, line: number, raw: string, lang: string, illustrative: boolean): DocCommand {
  const { text, comment } = splitComment(raw);
  const m = comment === undefined ? null : EXIT.exec(comment);
  return { file, line, text, comment, exit: m ? Number(m[1]) : undefined, output: undefined, illustrative, lang };
}

/** Every command shown in one markdown file, with the problems found. */
export function extractCommands(file: string, markdown: string): Extracted {
  const commands: DocCommand[] = [];
  const problems: string[] = [];
  for (const b of blocks(markdown)) {
    if (!RUN_LANGS.has(b.lang)) {
      if (b.lang === "") {
        const i = b.lines.findIndex((l) => /^(\$ |muster( |$))/.test(l));
        if (i >= 0) problems.push(`${file}:${b.start + i}: an untagged block shows a command: tag it \`sh\` or \`console\` (run by test/docs/commands.test.ts) or \`text\` (not run)`);
      }
      continue;
    }
    if (b.lang === "console") {
      let current: DocCommand | undefined;
      b.lines.forEach((l, i) => {
        if (l.startsWith("$ ")) {
          current = command(file, b.start + i, l.slice(2), b.lang, b.illustrative);
          commands.push(current);
        } else if (!current) {
          if (l.trim()) problems.push(`${file}:${b.start + i}: output before any \`$ \` command in a console block`);
        } else {
          (current.output ??= []).push(l);
        }
      });
      continue;
    }
    for (let i = 0; i < b.lines.length; i++) {
      const start = i;
      let raw = b.lines[i]!;
      while (raw.endsWith("\\") && i + 1 < b.lines.length) raw = `${raw.slice(0, -1).trimEnd()} ${b.lines[++i]!.trim()}`;
      if (!raw.trim() || raw.trim().startsWith("#")) continue;
      if (raw.startsWith("$ ")) problems.push(`${file}:${b.start + start}: \`$ \` prompt in a ${b.lang} block: use a console block to show output, or drop the prompt`);
      commands.push(command(file, b.start + start, raw.replace(/^\$ /, "").trim(), b.lang, b.illustrative));
    }
  }
  return { commands, problems };
}

const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

/** Checks actual output against shown output; undefined when it matches, else what differs. */
export function matchOutput(expected: string[], actual: string): string | undefined {
  const trim = (lines: string[]) => {
    const t = lines.map((l) => l.trimEnd());
    while (t.length && t[t.length - 1] === "") t.pop();
    while (t.length && t[0] === "") t.shift();
    return t;
  };
  const want = trim(expected);
  const got = trim(actual.split("\n"));
  const source = want.map((l) => (l.trim() === "..." ? "(?:[^\\n]*\\n)*?" : `${l.split("...").map(escape).join("[^\\n]*")}\\n`)).join("");
  if (new RegExp(`^${source}$`).test(got.map((l) => `${l}\n`).join(""))) return undefined;
  // Name the first line that differs, for a useful failure message.
  const lineRe = (l: string) => new RegExp(`^${l.split("...").map(escape).join(".*")}$`);
  let g = 0;
  for (const w of want) {
    if (w.trim() === "...") return `output differs after a \`...\` line\nshown:\n${want.join("\n")}\nactual:\n${got.join("\n")}`;
    if (g >= got.length || !lineRe(w).test(got[g]!)) return `shown line ${JSON.stringify(w)} does not match actual line ${JSON.stringify(got[g] ?? "(end of output)")}\nactual:\n${got.join("\n")}`;
    g++;
  }
  return `the command printed more than shown:\n${got.slice(g).join("\n")}`;
}

/**
 * The lines of a document's ```text blocks (operators' commands shown, not run here: docs/deploy.md's
 * renders and set-up), each command whole (continuation lines joined). test/docs/deploy.test.ts
 * holds them to the lab's, and the site's guide check runs the node's as written.
 */
export function textBlockLines(markdown: string): string[] {
  return [...markdown.matchAll(/```text\n([\s\S]*?)```/g)].flatMap((b) => b[1]!.replace(/\\\n\s*/g, " ").split("\n"));
}
