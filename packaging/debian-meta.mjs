// The package's Debian metadata, made from what the tree already says (pure: data in, text out;
// build-deb.mjs gathers the data and writes the files):
//
//   changelog   debian/changelog format: one entry for the version being built, its lines from
//               CHANGELOG.md's section for that version when there is one, else the git log since
//               the previous version's entry (or the last commits)
//   copyright   DEP-5 (https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/): muster's
//               Apache-2.0 pointing at /usr/share/common-licenses, Node.js's licence, and every npm
//               package in the .deb with the licence its package.json declares

export const MAINTAINER = "muster developers <muster@example.net>";

/** SPDX identifiers as DEP-5 names them (DEP-5 predates SPDX's MIT; Debian calls it Expat). */
const DEP5_NAME = { MIT: "Expat", "MIT-0": "MIT-0", ISC: "ISC", "Apache-2.0": "Apache-2.0", "BSD-2-Clause": "BSD-2-clause", "BSD-3-Clause": "BSD-3-clause", "BlueOak-1.0.0": "BlueOak-1.0.0", Unlicense: "Unlicense", "0BSD": "0BSD", "CC0-1.0": "CC0-1.0" };

/** A package.json `license` (or the old `licenses` array) as a DEP-5 licence expression. */
export function dep5License(pkgJson) {
  let spdx = pkgJson.license ?? pkgJson.licenses;
  if (Array.isArray(spdx)) spdx = spdx.map((l) => (typeof l === "string" ? l : l.type)).join(" OR ");
  if (spdx && typeof spdx === "object") spdx = spdx.type;
  if (typeof spdx !== "string" || spdx === "") throw new Error(`${pkgJson.name}: package.json declares no licence; check it by hand before shipping it`);
  return spdx
    .replace(/[()]/g, "")
    .split(/\s+(OR|AND)\s+/)
    .map((t) => (t === "OR" ? "or" : t === "AND" ? "and" : (DEP5_NAME[t] ?? t)))
    .join(" ");
}

/** The licence names a DEP-5 expression uses (each needs a stand-alone License paragraph). */
export function licenseNames(expr) {
  return expr.split(/\s+(?:or|and)\s+/);
}

/** `Copyright:` lines from a LICENSE text, else from package.json's author. */
export function copyrightHolders(licenseText, pkgJson) {
  const lines = (licenseText ?? "")
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => /^(\(c\)|©|copyright\b)/i.test(l) && !/copyright (notice|holders?|owner)|above copyright/i.test(l))
    .map((l) => l.replace(/^copyright\s*(\(c\)|©)?\s*/i, "").trim())
    .filter(Boolean);
  if (lines.length) return [...new Set(lines)];
  const a = pkgJson.author;
  const author = typeof a === "string" ? a : a?.name;
  return [author ? author : `the ${pkgJson.name} authors`];
}

/** A licence text with its copyright lines and title removed: the text every holder shares. */
export function genericLicenseText(text) {
  const lines = text.replace(/\r\n/g, "\n").split("\n");
  const body = lines.filter((l) => !/^\s*(\(c\)|©|copyright\b(?!\s+(notice|holders?|owner)))/i.test(l.trim()) || /above copyright/i.test(l));
  while (body.length && (body[0].trim() === "" || /^(the )?(mit|isc|unlicense|blue oak|bsd|apache)\b.*licen[cs]e.*$/i.test(body[0].trim()) || /^#/.test(body[0]))) body.shift();
  while (body.length && body.at(-1).trim() === "") body.pop();
  return body.join("\n");
}

/**
 * A licence text with every full copy of the Apache License 2.0 in it (Node.js's quotes it for
 * OpenSSL) replaced by Debian's pointer to /usr/share/common-licenses, as policy 12.5 asks.
 */
export function pointAtCommonApache(text) {
  const lines = text.split("\n");
  for (;;) {
    const start = lines.findIndex((l, i) => /^\s*Apache License\s*$/.test(l) && /^\s*Version 2\.0, January 2004\s*$/.test(lines[i + 1] ?? ""));
    if (start < 0) return lines.join("\n");
    const end = lines.findIndex((l, i) => i > start && /^\s*END OF TERMS AND CONDITIONS\s*$/.test(l));
    if (end < 0) return lines.join("\n");
    // the APPENDIX (how to apply the licence) goes too, up to its boilerplate's last line
    let last = end;
    const appendix = lines.findIndex((l, i) => i > end && i < end + 8 && /APPENDIX: How to apply the Apache License/.test(l));
    if (appendix > 0) {
      const close = lines.findIndex((l, i) => i > appendix && /limitations under the License\.\s*$/.test(l));
      if (close > 0) last = close;
    }
    const indent = /^\s*/.exec(lines[start])[0].length > 8 ? "    " : "";
    lines.splice(start, last - start + 1, `${indent}Apache License, Version 2.0: on Debian systems, the complete text is in`, `${indent}"/usr/share/common-licenses/Apache-2.0".`);
  }
}

/** Text as a DEP-5 field continuation: each line indented one space, blank lines as " .". */
export function fieldText(text) {
  return text
    .split("\n")
    .map((l) => (l.trim() === "" ? " ." : ` ${l.replace(/\s+$/, "")}`))
    .join("\n");
}

/**
 * The copyright file. `modules`: [{dir (path in the package), name, version, license (DEP-5),
 * holders}], `texts`: licence name -> generic text, `node`: {version, licenseText}.
 */
export function copyrightFile({ version, modules, texts, node }) {
  const paras = [
    ["Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/", "Upstream-Name: muster", "Source: https://github.com/muster/muster"].join("\n"),
    ["Files: *", "Copyright: muster developers", `License: Apache-2.0`, `Comment: muster ${version} itself: /usr/bin/muster, /usr/lib/muster/app (but its node_modules), the units, configs and docs.`].join("\n"),
    [
      "Files: usr/lib/muster/node",
      "Copyright: Node.js contributors and the authors of the code it bundles",
      "License: Node.js",
      `Comment: the Node.js ${node.version} runtime muster runs on (docs/decisions/shipping.md). Node.js is Expat-licensed;`,
      " it links in V8, libuv, OpenSSL, zlib, ICU, llhttp and others, each under the licence its section",
      " of the Node.js licence below names.",
    ].join("\n"),
  ];
  for (const m of [...modules].sort((a, b) => a.dir.localeCompare(b.dir))) {
    paras.push([`Files: ${m.dir}/*`, `Copyright: ${m.holders.join("\n ")}`, `License: ${m.license}`, `Comment: npm package ${m.name} ${m.version}`].join("\n"));
  }
  paras.push(
    [
      "License: Apache-2.0",
      " Licensed under the Apache License, Version 2.0 (the \"License\"); you may not use this file except",
      " in compliance with the License. You may obtain a copy of the License at",
      " .",
      "     https://www.apache.org/licenses/LICENSE-2.0",
      " .",
      " Unless required by applicable law or agreed to in writing, software distributed under the License",
      " is distributed on an \"AS IS\" BASIS, WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express",
      " or implied. See the License for the specific language governing permissions and limitations under",
      " the License.",
      " .",
      " On Debian systems, the complete text of the Apache License, Version 2.0 can be found in",
      " \"/usr/share/common-licenses/Apache-2.0\".",
    ].join("\n"),
  );
  const used = new Set(modules.flatMap((m) => licenseNames(m.license)));
  used.delete("Apache-2.0");
  for (const name of [...used].sort()) {
    const text = texts[name];
    if (!text) throw new Error(`no licence text for ${name}: a bundled package declares it but ships no LICENSE file to quote`);
    paras.push(`License: ${name}\n${fieldText(pointAtCommonApache(text))}`);
  }
  paras.push(`License: Node.js\n${fieldText(pointAtCommonApache(node.licenseText))}`);
  return paras.join("\n\n") + "\n";
}

/** An RFC 5322 date as debian/changelog wants it, from a Date. */
export function changelogDate(d) {
  const day = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"][d.getUTCDay()];
  const mon = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"][d.getUTCMonth()];
  const p = (n) => String(n).padStart(2, "0");
  return `${day}, ${p(d.getUTCDate())} ${mon} ${d.getUTCFullYear()} ${p(d.getUTCHours())}:${p(d.getUTCMinutes())}:${p(d.getUTCSeconds())} +0000`;
}

/** The section of a CHANGELOG.md ("## 0.2.0 ..." up to the next "## ") for a version, as bullet lines. */
export function changelogMdSection(md, version) {
  const lines = md.split("\n");
  const start = lines.findIndex((l) => new RegExp(`^##\\s+\\[?v?${version.replace(/[.+~]/g, "\\$&")}\\]?(\\s|$)`).test(l));
  if (start < 0) return undefined;
  const out = [];
  for (const l of lines.slice(start + 1)) {
    if (/^##\s/.test(l)) break;
    const m = /^\s*[-*]\s+(.*)$/.exec(l);
    if (m) out.push(m[1].trim());
  }
  return out.length ? out : undefined;
}

/** One debian/changelog entry. `changes`: one line each (wrapped to 80 columns here). */
export function changelogEntry({ version, changes, date }) {
  const wrap = (text) => {
    const words = text.split(/\s+/);
    const out = [];
    let line = "  *";
    for (const w of words) {
      if (line.length + 1 + w.length > 80 && line.trim() !== "*") {
        out.push(line);
        line = "   ";
      }
      line += ` ${w}`;
    }
    out.push(line);
    return out.join("\n");
  };
  return [`muster (${version}) unstable; urgency=medium`, "", ...changes.map(wrap), "", ` -- ${MAINTAINER}  ${changelogDate(date)}`, ""].join("\n");
}
