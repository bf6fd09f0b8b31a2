// A virtual list: only the rows in view (plus a few either side) exist in the DOM, so 10,000 rows
// scroll as smoothly as 50. Fixed row height; the spacer gives the scrollbar its full length.
import { render } from "/vendor/lit-html/lit-html.js";
import { visibleRange } from "./model.js";

export class VirtualList {
  /**
   * @param {HTMLElement} viewport a scrolling element (overflow-y: auto, with a height)
   * @param {number} rowHeight px, as the CSS gives the rows
   * @param {(index: number) => unknown} renderRow a lit-html template for row `index`
   * @param {(first: number, last: number) => void} [onRange] told which rows are shown (to fetch them)
   */
  constructor(viewport, rowHeight, renderRow, onRange) {
    this.viewport = viewport;
    this.rowHeight = rowHeight;
    this.renderRow = renderRow;
    this.onRange = onRange;
    this.total = 0;
    this.spacer = document.createElement("div");
    this.spacer.className = "vspacer";
    this.window = document.createElement("div");
    this.window.className = "vwindow";
    this.spacer.append(this.window);
    viewport.replaceChildren(this.spacer);
    this.pending = false;
    this.onScroll = () => this.schedule();
    viewport.addEventListener("scroll", this.onScroll, { passive: true });
    this.resizeObserver = new ResizeObserver(() => this.schedule());
    this.resizeObserver.observe(viewport);
  }

  setTotal(total) {
    this.total = total;
    // CSSOM, not a style attribute: the CSP (style-src 'self') allows this.
    this.spacer.style.height = `${total * this.rowHeight}px`;
    this.schedule();
  }

  /** Re-render on the next frame, once however often it is asked. */
  schedule() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => {
      this.pending = false;
      this.draw();
    });
  }

  draw() {
    const { first, last } = visibleRange(this.viewport.scrollTop, this.viewport.clientHeight || 600, this.rowHeight, this.total);
    this.window.style.transform = `translateY(${first * this.rowHeight}px)`;
    const rows = [];
    for (let i = first; i < last; i++) rows.push(this.renderRow(i));
    render(rows, this.window);
    this.onRange?.(first, last);
  }

  destroy() {
    this.viewport.removeEventListener("scroll", this.onScroll);
    this.resizeObserver.disconnect();
  }
}
