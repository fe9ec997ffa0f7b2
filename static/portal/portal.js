// A failed htmx request (403, 404, 500, network) would otherwise change nothing on screen:
// say so in the flash area, with the server's own sentence where it sent one.
document.addEventListener("htmx:responseError", function (event) {
  var xhr = event.detail.xhr;
  var text = "The request failed (" + xhr.status + ").";
  var doc = new DOMParser().parseFromString(xhr.responseText || "", "text/html");
  var reason = doc.querySelector(".form-errors, main p");
  if (reason && reason.textContent.trim()) {
    text = reason.textContent.trim();
  }
  showFlash(text);
});
document.addEventListener("htmx:sendError", function () {
  showFlash("The portal could not be reached. Check your connection and try again.");
});
function showFlash(text) {
  var box = document.getElementById("messages");
  if (!box) return;
  var div = document.createElement("div");
  div.className = "flash flash-error";
  div.setAttribute("role", "alert");
  div.textContent = text;
  box.replaceChildren(div);
}
