// stet review UI keyboard shortcuts: j/k move through the queue, a/o/r
// press the approve/override/reject buttons, ? shows the keys. Nothing else
// runs on any page.
(function () {
  "use strict";
  var dialog = document.getElementById("keys");

  function typing(e) {
    var t = e.target;
    if (!t) return false;
    if (t.isContentEditable || t.tagName === "TEXTAREA" || t.tagName === "SELECT") return true;
    return t.tagName === "INPUT" && t.type !== "checkbox" && t.type !== "radio";
  }

  function move(step) {
    var rows = Array.prototype.slice.call(document.querySelectorAll("tr[data-row]"));
    if (!rows.length) return;
    var i = -1;
    for (var n = 0; n < rows.length; n++) if (rows[n].classList.contains("current")) i = n;
    if (i >= 0) rows[i].classList.remove("current");
    i = i < 0 ? (step > 0 ? 0 : rows.length - 1) : Math.min(rows.length - 1, Math.max(0, i + step));
    rows[i].classList.add("current");
    var link = rows[i].querySelector("a.rowlink");
    if (link) link.focus();
  }

  function openKeys() {
    if (dialog && !dialog.open) dialog.showModal();
  }

  document.addEventListener("keydown", function (e) {
    if (e.ctrlKey || e.metaKey || e.altKey || e.isComposing || typing(e)) return;
    if (dialog && dialog.open) return; // Esc closes it
    var b;
    switch (e.key) {
      case "j": move(1); break;
      case "k": move(-1); break;
      case "a": case "o": case "r":
        b = document.querySelector('button[data-key="' + e.key + '"]');
        if (!b) return;
        b.click();
        break;
      case "?": openKeys(); break;
      default: return;
    }
    e.preventDefault();
  });

  var openers = document.querySelectorAll("[data-keys-open]");
  for (var i = 0; i < openers.length; i++) openers[i].addEventListener("click", openKeys);
  // The keys are live: a browser test waits for this before it types.
  document.documentElement.setAttribute("data-keys", "ready");
})();
