; Definitions: classes, functions/methods, module-level assignments.
(class_definition
  name: (identifier) @name.definition.class
  body: (block) @body) @definition.class

(function_definition
  name: (identifier) @name.definition.function
  body: (block) @body) @definition.function

(module
  (assignment
    left: (identifier) @name.definition.constant) @definition.constant)
