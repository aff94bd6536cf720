(function () {
  "use strict";
  var table = document.getElementById("sweep");
  var body = table.tBodies[0];
  Array.prototype.forEach.call(body.rows, function (row, index) { row.setAttribute("data-i", index); });
  function key(cell) {
    var rank = /\bk(\d)\b/.exec(cell.className);
    if (rank) { return Number(rank[1]); }
    var value = cell.getAttribute("data-k");
    return value === null ? cell.textContent : Number(value);
  }
  table.tHead.addEventListener("click", function (event) {
    var button = event.target.closest("button[data-col]");
    if (!button) { return; }
    var column = Number(button.getAttribute("data-col"));
    var header = button.parentNode;
    var descending = header.getAttribute("aria-sort") !== "descending";
    Array.prototype.forEach.call(table.tHead.querySelectorAll("th[aria-sort]"), function (th) {
      th.removeAttribute("aria-sort");
    });
    header.setAttribute("aria-sort", descending ? "descending" : "ascending");
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = key(a.cells[column]), y = key(b.cells[column]);
      var order = x < y ? -1 : (x > y ? 1 : 0);
      if (descending) { order = -order; }
      return order || Number(a.getAttribute("data-i")) - Number(b.getAttribute("data-i"));
    });
    var fragment = document.createDocumentFragment();
    rows.forEach(function (row) { fragment.appendChild(row); });
    body.appendChild(fragment);
  });
}());
