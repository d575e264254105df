"""The course as a static site (`python -m specviz site OUT`): every view and method on the recorded
real pair, drawn by the renderers at every step and played in the page without Python, a server
or a network.

    build   the command: the folder, its pages, data files and the course beside them
    views   a recording's frames, drawn by specviz.render (the app's and notebooks' renderers)
    codec   frames as edits of one another, gzip, base64: what a page decodes
    pages   the pages' HTML shells (start, gallery, explorer, batches, lab, glossary, course)
    static  player.js (plays frames), gallery.js (the pickers), site.css (the layout)
"""
