// Explorables (lse_energy/explorable.py): a range input steps the figure above it through
// frames rendered while the book was executed. Arrow keys (and Home/End) step it; the
// current value is stated in text. No network, no other script.
(function () {
  function init(box) {
    var dataEl = box.querySelector("script.lse-explorable-data");
    if (!dataEl) return;
    var data = JSON.parse(dataEl.textContent);
    var img = box.querySelector("img");
    if (!img) {
      img = document.createElement("img");
      img.alt = box.getAttribute("data-name") || "";
      box.insertBefore(img, box.firstChild);
    }
    var controls = box.querySelector(".lse-explorable-controls");
    var input = box.querySelector("input[type=range]");
    var out = box.querySelector("output");
    function show(k) {
      img.src = data.frames[k];
      out.textContent = data.labels[k];
      input.setAttribute("aria-valuetext", data.labels[k]);
    }
    input.addEventListener("input", function () { show(+input.value); });
    controls.hidden = false;
    box.classList.add("lse-explorable-ready");
    show(+input.value);
  }
  function all() {
    var boxes = document.querySelectorAll(".lse-explorable");
    for (var i = 0; i < boxes.length; i++) init(boxes[i]);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", all);
  else all();
})();
