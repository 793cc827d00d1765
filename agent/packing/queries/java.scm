(class_declaration
  name: (identifier) @name.definition.class
  body: (class_body) @body) @definition.class

(interface_declaration
  name: (identifier) @name.definition.interface
  body: (interface_body) @body) @definition.interface

(enum_declaration
  name: (identifier) @name.definition.enum
  body: (enum_body) @body) @definition.enum

(record_declaration
  name: (identifier) @name.definition.class
  body: (class_body) @body) @definition.class

(method_declaration
  name: (identifier) @name.definition.method
  body: (block) @body) @definition.method

(method_declaration
  name: (identifier) @name.definition.method
  !body) @definition.method

(constructor_declaration
  name: (identifier) @name.definition.method
  body: (constructor_body) @body) @definition.method
