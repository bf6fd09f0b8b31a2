// Sets CSS properties through CSSOM (element.style.setProperty). lit-html's styleMap writes a style
// attribute on first render, which the console's CSP (style-src 'self') blocks; CSSOM is allowed.
import { noChange } from "/vendor/lit-html/lit-html.js";
import { Directive, directive } from "/vendor/lit-html/directive.js";

class CssProps extends Directive {
  render() {
    return noChange;
  }
  update(part, [props]) {
    for (const [name, value] of Object.entries(props)) part.element.style.setProperty(name, value);
    return noChange;
  }
}

/** An element directive: `<span ${css({ width: "40%" })}></span>`. */
export const css = directive(CssProps);
