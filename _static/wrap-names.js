// Long code names in the text (tests/models/test_x.py::test_a_long_name) and the module prefixes of
// API signatures (lse_energy.experiments.structural_tasks.) may break after "/", "::", "_"
// or "." instead of at any letter (_static/custom.css lets them wrap). Only the display
// changes: the text, and so copying and search, stay.
document.addEventListener("DOMContentLoaded", () => {
  const names = ".bd-article code.literal span.pre, dt.sig .sig-prename span.pre, dt.sig .sig-name span.pre";
  document.querySelectorAll(names).forEach((span) => {
    const text = span.textContent;
    if (span.children.length || !/[\/_.:]./.test(text)) return;
    const parts = text.split(/(?<=::|[\/_.])(?!:)/);
    span.textContent = "";
    parts.forEach((part, i) => {
      if (i) span.appendChild(document.createElement("wbr"));
      span.appendChild(document.createTextNode(part));
    });
  });
});
