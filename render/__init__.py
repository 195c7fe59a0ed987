"""The render stage: pages that build their content with JavaScript, loaded in headless
Chromium (:mod:`render.browser`); which pages are rendered is :mod:`common.rendering`.
"""
