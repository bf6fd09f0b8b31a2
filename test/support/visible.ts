import type { Page } from "playwright-core";

// What the browser tests check of the console's rendering, beyond axe: that an element shows whole
// (no ancestor's overflow or paint containment cuts it, its own text is not cut to an ellipsis,
// and it lies inside a given box, say its card), and that a focused control has a focus
// indicator one can see (an outline or ring of at least 2 px, 3:1 against what is behind it, not
// cut by an ancestor, and not a box the control draws anyway). Each returns what is wrong, as
// readable lines: empty when all is well.

/** Why the element (the first match of `selector`) does not show whole; `within`: a selector of an ancestor whose box it must lie in. */
export async function cutOff(page: Page, selector: string, o: { within?: string } = {}): Promise<string[]> {
  return page.locator(selector).first().evaluate(
    (el, o) => {
      const out: string[] = [];
      const r = el.getBoundingClientRect();
      if (r.width === 0 || r.height === 0) return [`${o.selector} has no size`];
      const px = (v: string) => parseFloat(v) || 0;
      const name = (a: Element) => `${a.tagName.toLowerCase()}${a.id ? `#${a.id}` : ""}${a.classList.length ? `.${[...a.classList].join(".")}` : ""}`;
      if (el instanceof HTMLElement && getComputedStyle(el).overflowX !== "visible" && el.scrollWidth > el.clientWidth + 0.5) out.push(`${o.selector}: its content is cut (scrollWidth ${el.scrollWidth} > clientWidth ${el.clientWidth})`);
      for (let a = el.parentElement; a; a = a.parentElement) {
        const cs = getComputedStyle(a);
        const paint = /paint|strict|content/.test(cs.contain);
        const clipX = paint || cs.overflowX !== "visible";
        const clipY = paint || cs.overflowY !== "visible";
        if (!clipX && !clipY) continue;
        if (a === document.documentElement || a === document.body) continue; // the page scrolls
        // what an ancestor clips to: its padding box
        const ar = a.getBoundingClientRect();
        const box = { left: ar.left + px(cs.borderLeftWidth), right: ar.right - px(cs.borderRightWidth), top: ar.top + px(cs.borderTopWidth), bottom: ar.bottom - px(cs.borderBottomWidth) };
        if (clipX && (r.left < box.left - 0.5 || r.right > box.right + 0.5)) out.push(`${o.selector} (x ${r.left.toFixed(1)}..${r.right.toFixed(1)}) is cut by ${name(a)} (x ${box.left.toFixed(1)}..${box.right.toFixed(1)}, overflow-x ${cs.overflowX}${paint ? `, contain ${cs.contain}` : ""})`);
        if (clipY && (r.top < box.top - 0.5 || r.bottom > box.bottom + 0.5)) out.push(`${o.selector} (y ${r.top.toFixed(1)}..${r.bottom.toFixed(1)}) is cut by ${name(a)} (y ${box.top.toFixed(1)}..${box.bottom.toFixed(1)}, overflow-y ${cs.overflowY}${paint ? `, contain ${cs.contain}` : ""})`);
      }
      if (o.within) {
        const w = el.closest(o.within);
        if (!w) out.push(`${o.selector} is not inside ${o.within}`);
        else {
          const wr = w.getBoundingClientRect();
          if (r.left < wr.left - 0.5 || r.right > wr.right + 0.5 || r.top < wr.top - 0.5 || r.bottom > wr.bottom + 0.5) out.push(`${o.selector} (${r.left.toFixed(1)},${r.top.toFixed(1)} to ${r.right.toFixed(1)},${r.bottom.toFixed(1)}) sticks out of ${o.within} (${wr.left.toFixed(1)},${wr.top.toFixed(1)} to ${wr.right.toFixed(1)},${wr.bottom.toFixed(1)})`);
        }
      }
      return out;
    },
    { selector, within: o.within },
  );
}

/**
 * Why the focus on the element (the first match of `selector`) is not plainly visible. It is
 * focused as the keyboard would (keyboard modality first, so :focus-visible applies), and must then
 * draw an outline or box-shadow ring of at least 2 px with 3:1 contrast against the background
 * behind it, whose outer edge no ancestor clips; unfocused, it must not draw a box of that colour
 * (a ring that looks the same as no focus is no indicator).
 */
export async function focusProblems(page: Page, selector: string): Promise<string[]> {
  const el = page.locator(selector).first();
  await el.evaluate((e) => (e as HTMLElement).blur());
  const before = await el.evaluate((e) => {
    const cs = getComputedStyle(e);
    return { outline: cs.outlineStyle === "none" ? "" : `${cs.outlineWidth} ${cs.outlineStyle} ${cs.outlineColor}`, border: ["Top", "Right", "Bottom", "Left"].map((s) => (parseFloat(cs.getPropertyValue(`border-${s.toLowerCase()}-width`)) > 0 && cs.getPropertyValue(`border-${s.toLowerCase()}-style`) !== "none" ? cs.getPropertyValue(`border-${s.toLowerCase()}-color`) : "")) };
  });
  await page.keyboard.press("Shift"); // keyboard modality: a scripted focus now shows as the keyboard's would
  await el.focus();
  return el.evaluate(
    (e, o) => {
      const out: string[] = [];
      if (document.activeElement !== e) return [`${o.selector} does not take focus`];
      if (!e.matches(":focus-visible")) out.push(`${o.selector} is focused but not :focus-visible`);
      const cs = getComputedStyle(e);
      const px = (v: string) => parseFloat(v) || 0;
      const rgb = (c: string) => {
        const m = /rgba?\(([\d.]+),\s*([\d.]+),\s*([\d.]+)(?:,\s*([\d.]+))?\)/.exec(c);
        return m ? { r: +m[1]!, g: +m[2]!, b: +m[3]!, a: m[4] === undefined ? 1 : +m[4] } : undefined;
      };
      const lum = (c: { r: number; g: number; b: number }) => {
        const f = (v: number) => ((v /= 255) <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4);
        return 0.2126 * f(c.r) + 0.7152 * f(c.g) + 0.0722 * f(c.b);
      };
      const contrast = (a: { r: number; g: number; b: number }, b: { r: number; g: number; b: number }) => {
        const [x, y] = [lum(a), lum(b)].sort((p, q) => q - p);
        return (x! + 0.05) / (y! + 0.05);
      };
      // what is behind the ring: the first ancestor with an opaque background
      let behind = { r: 255, g: 255, b: 255 };
      for (let a = e.parentElement; a; a = a.parentElement) {
        const c = rgb(getComputedStyle(a).backgroundColor);
        if (c && c.a > 0.99) {
          behind = c;
          break;
        }
      }
      // the ring: the outline, else a box-shadow's spread
      let ring: { width: number; outside: number; color: string } | undefined;
      if (cs.outlineStyle !== "none" && px(cs.outlineWidth) > 0) ring = { width: px(cs.outlineWidth), outside: Math.max(0, px(cs.outlineWidth) + px(cs.outlineOffset)), color: cs.outlineColor };
      const shadow = /^(rgba?\([^)]*\))\s+0px\s+0px\s+0px\s+([\d.]+)px$/.exec(cs.boxShadow);
      if (shadow && (!ring || ring.outside < px(shadow[2]!))) ring = { width: Math.max(ring?.width ?? 0, px(shadow[2]!)), outside: px(shadow[2]!), color: ring?.color ?? shadow[1]! };
      if (!ring) return [...out, `${o.selector} focused draws no outline or ring (outline ${cs.outlineStyle} ${cs.outlineWidth}, box-shadow ${cs.boxShadow})`];
      if (ring.width < 2) out.push(`${o.selector}'s focus ring is ${ring.width}px: under 2px`);
      const rc = rgb(ring.color);
      if (rc && contrast(rc, behind) < 3) out.push(`${o.selector}'s focus ring ${ring.color} has ${contrast(rc, behind).toFixed(2)}:1 against ${JSON.stringify(behind)}: under 3:1`);
      // unfocused, the same box: no indicator
      if (o.before.outline && o.before.outline === `${cs.outlineWidth} ${cs.outlineStyle} ${cs.outlineColor}`) out.push(`${o.selector} draws the same outline unfocused (${o.before.outline})`);
      if (o.before.border.some((c) => c && c === ring!.color)) out.push(`${o.selector} always draws a border of its focus colour ${ring.color} (${o.before.border.join(" / ")}): focusing it hardly shows`);
      // the ring's outer edge, inside every ancestor that clips
      const r = e.getBoundingClientRect();
      const edge = { left: r.left - ring.outside, right: r.right + ring.outside, top: r.top - ring.outside, bottom: r.bottom + ring.outside };
      for (let a = e.parentElement; a && a !== document.body; a = a.parentElement) {
        const as = getComputedStyle(a);
        const paint = /paint|strict|content/.test(as.contain);
        const clipX = paint || as.overflowX !== "visible";
        const clipY = paint || as.overflowY !== "visible";
        if (!clipX && !clipY) continue;
        const ar = a.getBoundingClientRect();
        const box = { left: ar.left + px(as.borderLeftWidth), right: ar.right - px(as.borderRightWidth), top: ar.top + px(as.borderTopWidth), bottom: ar.bottom - px(as.borderBottomWidth) };
        const cut = (clipX && (edge.left < box.left - 0.5 || edge.right > box.right + 0.5)) || (clipY && (edge.top < box.top - 0.5 || edge.bottom > box.bottom + 0.5));
        if (cut) out.push(`${o.selector}'s focus ring (${ring.outside}px outside it) is cut by ${a.tagName.toLowerCase()}.${[...a.classList].join(".")} (overflow ${as.overflowX}/${as.overflowY}${paint ? `, contain ${as.contain}` : ""})`);
      }
      return out;
    },
    { selector, before },
  );
}
