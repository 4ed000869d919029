/* Plotly builds its stylesheets at run time (<style> elements for the mode bar and hover labels) and offers no
   nonce setting. Under the Content-Security-Policy such an element applies only if it carries the response's
   nonce, so style elements created by script get the nonce this script was loaded with. Loaded before Plotly. */
(function () {
  "use strict";
  var nonce = document.currentScript && document.currentScript.nonce;
  if (!nonce) { return; }
  var create = document.createElement.bind(document);
  document.createElement = function (tag, options) {
    var element = create(tag, options);
    if (String(tag).toLowerCase() === "style") { element.nonce = nonce; }
    return element;
  };
})();
