/* Starts ReDoc on the API docs page (templates/api/redoc.html) without inline script: the schema URL comes from
   this script's data attribute, and the nonce it was loaded with goes to ReDoc, which sets it on the style
   elements it creates. Search is off: its index runs in a Worker built from a blob: URL, which the policy refuses.
   ReDoc's menu shows Redocly's logo from Redocly's CDN; the docs load nothing from another origin, so an image
   source outside ours becomes an empty data: URL (the logo then fails to load, and ReDoc leaves it out). */
(function () {
  "use strict";
  var script = document.currentScript;
  function local(value) {
    var url = new URL(value, window.location.href);
    return url.protocol === "data:" || url.origin === window.location.origin ? value : "data:,";
  }
  var setAttribute = Element.prototype.setAttribute;
  Element.prototype.setAttribute = function (name, value) {
    var src = this.tagName === "IMG" && String(name).toLowerCase() === "src";
    return setAttribute.call(this, name, src ? local(String(value)) : value);
  };
  var src = Object.getOwnPropertyDescriptor(HTMLImageElement.prototype, "src");
  Object.defineProperty(HTMLImageElement.prototype, "src", {
    configurable: true, enumerable: src.enumerable, get: src.get,
    set: function (value) { src.set.call(this, local(String(value))); }
  });
  window.Redoc.init(script.dataset.schemaUrl, {nonce: script.nonce, disableSearch: true},
                    document.getElementById("redoc-container"));
})();
