// Forms with data-confirm ask before they submit. The question is read from an attribute
// (HTML-escaped by the template) rather than written into inline script, so a group id with
// quotes in it stays text.
(function () {
  "use strict";
  document.querySelectorAll("form[data-confirm]").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      if (!window.confirm(form.dataset.confirm)) {
        event.preventDefault();
      }
    });
  });
})();
