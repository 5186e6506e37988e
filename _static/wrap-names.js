// Long code names in the text (tests/test_x.py::test_a_long_name, lse_energy.experiments.store)
// may break after "/", "::", "_" or "." instead of at any letter (_static/custom.css lets
// inline code wrap). Only the display changes: the text, and so copying and search, stay.
document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll(".bd-article code.literal span.pre").forEach((span) => {
    const text = span.textContent;
    if (text.length < 20 || span.children.length || !/[\/_.:]/.test(text)) return;
    const parts = text.split(/(?<=::|[\/_.])(?!:)/);
    span.textContent = "";
    parts.forEach((part, i) => {
      if (i) span.appendChild(document.createElement("wbr"));
      span.appendChild(document.createTextNode(part));
    });
  });
});
