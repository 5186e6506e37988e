// Search results quote a few lines of each page. Sphinx takes them from the page's HTML, where
// a formula is still its TeX source ("\(\mathrm{sim}(v_c, v_p)\)"), so snippets showed raw TeX
// (issue 50, point 7). Before the text is taken, inline formulas become a plain reading of
// their TeX (commands and braces dropped) and display formulas an ellipsis.
(() => {
  const plain = (tex) =>
    tex
      .replace(/^\\\(|\\\)$/g, "")
      .replace(/\\(?:mathrm|mathbf|mathcal|operatorname|text|tfrac|frac|left|right|big|Big)\b/g, "")
      .replace(/\\([a-zA-Z]+)/g, "$1")
      .replace(/[{}]/g, "")
      .replace(/\s+/g, " ")
      .trim();
  const patch = () => {
    if (typeof Search === "undefined" || Search.lseTextPatched) return;
    const original = Search.htmlToText;
    Search.htmlToText = (htmlString, anchor) => {
      const doc = new DOMParser().parseFromString(htmlString, "text/html");
      doc.querySelectorAll("div.math").forEach((el) => el.replaceWith(doc.createTextNode(" … ")));
      doc.querySelectorAll("span.math").forEach((el) => el.replaceWith(doc.createTextNode(plain(el.textContent))));
      return original(doc.documentElement.outerHTML, anchor);
    };
    Search.lseTextPatched = true;
  };
  patch();
  document.addEventListener("DOMContentLoaded", patch);
})();
