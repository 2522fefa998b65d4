// Renders the formulas pymdownx.arithmatex (generic mode) wraps in .arithmatex elements,
// with the KaTeX shipped beside this file (katex/: KaTeX 0.19.1 from npm, MIT licence in
// katex/LICENSE): the site needs no network to show its maths.
function renderFormulas() {
  document.querySelectorAll(".arithmatex").forEach(function (element) {
    renderMathInElement(element, {
      delimiters: [
        { left: "\\(", right: "\\)", display: false },
        { left: "\\[", right: "\\]", display: true },
      ],
      throwOnError: false,
    });
  });
}
if (typeof document$ !== "undefined") {
  document$.subscribe(renderFormulas);  // Material's page-change stream
} else {
  document.addEventListener("DOMContentLoaded", renderFormulas);
}
